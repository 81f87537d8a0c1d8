// Kafka's Java AdminClient, driven from the command line, for the calls Kafka's tools do not
// make: topics by id (KIP-516). Compiled at test time against the jars scripts/kafka/fetch
// cached (quorum/kafka_peer.py compile_driver), into that cache, never into the repository.
//
//   java -cp <cache>/libs/*:<classes> AdminDriver <client.properties> <bootstrap> COMMAND ARGS
//
// COMMAND: list                  one line per topic: name, id, internal (tab-separated)
//          describe-names NAME.. describeTopics(TopicCollection.ofTopicNames(...))
//          describe-ids ID..     describeTopics(TopicCollection.ofTopicIds(...))
//          delete-ids ID..       deleteTopics(TopicCollection.ofTopicIds(...))
// A described topic prints "topic <name> <id> <partitions> <replication factor>" and one line
// "partition <p> <leader> <replicas> <isr>" per partition; a deletion "deleted <id>". A failed
// item prints "error <item> <exception class> <message>" and the exit code is 1.

import java.io.FileInputStream;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TopicListing;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;

public final class AdminDriver {
    private AdminDriver() {
    }

    private static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    private static void print(TopicDescription topic) {
        List<TopicPartitionInfo> partitions = topic.partitions();
        int replicationFactor = partitions.isEmpty() ? 0 : partitions.get(0).replicas().size();
        System.out.println("topic " + topic.name() + " " + topic.topicId() + " "
            + partitions.size() + " " + replicationFactor);
        for (TopicPartitionInfo partition : partitions) {
            Node leader = partition.leader();
            System.out.println("partition " + partition.partition() + " "
                + (leader == null ? -1 : leader.id()) + " " + ids(partition.replicas()) + " "
                + ids(partition.isr()));
        }
    }

    private static Throwable cause(ExecutionException e) {
        return e.getCause() == null ? e : e.getCause();
    }

    private static boolean error(String item, Throwable t) {
        System.out.println("error " + item + " " + t.getClass().getName() + " " + t.getMessage());
        return false;
    }

    private static <K> boolean report(Map<K, KafkaFuture<TopicDescription>> futures) {
        boolean ok = true;
        for (Map.Entry<K, KafkaFuture<TopicDescription>> entry : futures.entrySet()) {
            try {
                print(entry.getValue().get());
            } catch (ExecutionException e) {
                ok = error(entry.getKey().toString(), cause(e));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return ok;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: AdminDriver <client.properties> <bootstrap> COMMAND ARGS");
            System.exit(2);
        }
        Properties config = new Properties();
        if (!args[0].isEmpty()) {
            try (InputStream in = new FileInputStream(args[0])) {
                config.load(in);
            }
        }
        config.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
        String command = args[2];
        List<String> rest = List.of(args).subList(3, args.length);
        List<Uuid> topicIds = new ArrayList<>();
        if (command.endsWith("-ids")) {
            for (String id : rest) {
                topicIds.add(Uuid.fromString(id));
            }
        }
        boolean ok = true;
        try (Admin admin = Admin.create(config)) {
            switch (command) {
                case "list":
                    for (TopicListing listing : admin.listTopics(new ListTopicsOptions().listInternal(true))
                            .listings().get()) {
                        System.out.println(listing.name() + "\t" + listing.topicId() + "\t" + listing.isInternal());
                    }
                    break;
                case "describe-names":
                    ok = report(admin.describeTopics(TopicCollection.ofTopicNames(rest)).topicNameValues());
                    break;
                case "describe-ids":
                    ok = report(admin.describeTopics(TopicCollection.ofTopicIds(topicIds)).topicIdValues());
                    break;
                case "delete-ids":
                    for (Map.Entry<Uuid, KafkaFuture<Void>> entry
                            : admin.deleteTopics(TopicCollection.ofTopicIds(topicIds)).topicIdValues().entrySet()) {
                        try {
                            entry.getValue().get();
                            System.out.println("deleted " + entry.getKey());
                        } catch (ExecutionException e) {
                            ok = error(entry.getKey().toString(), cause(e));
                        }
                    }
                    break;
                default:
                    System.err.println("unknown command " + command);
                    System.exit(2);
            }
        } catch (ExecutionException e) {
            ok = error(command, cause(e));
        }
        System.exit(ok ? 0 : 1);
    }
}
