package dev.kafscale.jvm;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.StringJoiner;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/**
 * The Java client on a compacted topic (partition 0), each client in its defaults.
 *
 * <pre>
 * CompactedChecks produce BOOTSTRAP TOPIC KEYS ROUNDS
 * CompactedChecks consume BOOTSTRAP TOPIC
 * </pre>
 *
 * produce: ROUNDS values of keys k0..k(KEYS-1) ("r&lt;round&gt;-k&lt;key&gt;"), round after
 * round, then k0 = "last", every send acknowledged; prints {"acked": N}. consume: reads from
 * the beginning to the end offset, as an assigned consumer; prints {"records": [[offset,
 * "key", "value"], ...], "position": P, "end": E}.
 */
public final class CompactedChecks {
    private static final Duration WAIT = Duration.ofSeconds(60);

    private CompactedChecks() {}

    public static void main(String[] argv) throws Exception {
        if (argv.length < 3 || (argv[0].equals("produce") && argv.length != 5)) {
            System.err.println("usage: CompactedChecks produce BOOTSTRAP TOPIC KEYS ROUNDS"
                    + " | consume BOOTSTRAP TOPIC");
            System.exit(2);
        }
        if (argv[0].equals("produce")) {
            produce(argv[1], argv[2], Integer.parseInt(argv[3]), Integer.parseInt(argv[4]));
        } else {
            consume(argv[1], argv[2]);
        }
    }

    static void produce(String bootstrap, String topic, int keys, int rounds) throws Exception {
        int acked = 0;
        try (KafkaProducer<String, String> producer = ClientChecks.producer(bootstrap)) {
            for (int r = 0; r < rounds; r++) {
                for (int k = 0; k < keys; k++) {
                    send(producer, topic, "k" + k, "r" + r + "-k" + k);
                    acked++;
                }
            }
            producer.flush();
            send(producer, topic, "k0", "last");
            acked++;
        }
        System.out.println(ClientChecks.json(Map.of("acked", acked)));
    }

    private static void send(KafkaProducer<String, String> producer, String topic, String key,
            String value) throws Exception {
        producer.send(new ProducerRecord<>(topic, 0, key, value)).get();
    }

    static void consume(String bootstrap, String topic) {
        TopicPartition partition = new TopicPartition(topic, 0);
        StringJoiner records = new StringJoiner(", ", "[", "]");
        long position;
        long end;
        try (KafkaConsumer<String, String> consumer =
                ClientChecks.consumer(bootstrap, topic + "-reader")) {
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            end = consumer.endOffsets(List.of(partition)).get(partition);
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            while (consumer.position(partition) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    records.add("[" + r.offset() + ", " + ClientChecks.quoted(r.key()) + ", "
                            + (r.value() == null ? "null" : ClientChecks.quoted(r.value())) + "]");
                }
            }
            position = consumer.position(partition);
        }
        System.out.println("{\"records\": " + records + ", \"position\": " + position
                + ", \"end\": " + end + "}");
    }
}
