/*
 * Kafka's kafka-consumer-groups (ConsumerGroupCommand.main) run many times in one JVM, for
 * tests/process/test_groups_tool_process.py: a JVM start costs about two seconds of a core, a
 * run in a warm JVM a few milliseconds. Each line of stdin is one run's arguments, separated by
 * tabs; for each, this prints "<exit code> <stdout bytes> <stderr bytes>\n" and then the run's
 * stdout and stderr. Compiled into the Kafka cache by quorum.kafka_peer.compile_driver.
 *
 * Kafka's Exit.exit is replaced by an exception; what the command printed after it (Kafka's
 * own catch-all reporting that exception) is cut off, as a real exit would never print it.
 */
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.utils.internals.Exit;
import org.apache.kafka.tools.consumer.group.ConsumerGroupCommand;

public class GroupsDriver {
    static final class ExitCalled extends RuntimeException {
        ExitCalled() {
            super("exit", null, false, false);
        }
    }

    static int exitCode;
    static int outAtExit;
    static int errAtExit;
    static boolean exited;

    public static void main(String[] ignored) throws Exception {
        PrintStream realOut = System.out;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] args = line.isEmpty() ? new String[0] : line.split("\t", -1);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream outStream = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream errStream = new PrintStream(err, true, StandardCharsets.UTF_8);
            exited = false;
            exitCode = 0;
            Exit.setExitProcedure((code, message) -> {
                if (!exited) {
                    outStream.flush();
                    errStream.flush();
                    exited = true;
                    exitCode = code;
                    outAtExit = out.size();
                    errAtExit = err.size();
                }
                throw new ExitCalled();
            });
            System.setOut(outStream);
            System.setErr(errStream);
            try {
                ConsumerGroupCommand.main(args);
            } catch (ExitCalled e) {
                // the exit procedure recorded it
            } catch (Throwable t) {
                System.err.print("Exception in thread \"main\" ");
                t.printStackTrace();
                if (!exited) {
                    exitCode = 1;
                }
            }
            outStream.flush();
            errStream.flush();
            System.setOut(realOut);
            byte[] outBytes = out.toByteArray();
            byte[] errBytes = err.toByteArray();
            int outLength = exited ? outAtExit : outBytes.length;
            int errLength = exited ? errAtExit : errBytes.length;
            realOut.print(exitCode + " " + outLength + " " + errLength + "\n");
            realOut.write(outBytes, 0, outLength);
            realOut.write(errBytes, 0, errLength);
            realOut.flush();
        }
    }
}
