"""The brokers' Kafka wire-protocol listener (docs/kafka-listener.md): Kafka's own clients
(kafka-python, confluent-kafka, kafka-topics) talk to a broker as to a Kafka broker."""
