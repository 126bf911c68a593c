package dev.kafscale.jvm;

import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.StringJoiner;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java producer in its defaults (idempotent, acks=all, retrying until its delivery timeout)
 * writing to every partition of a topic at a steady rate while the test kills brokers.
 *
 * <pre>
 * FailoverProducer BOOTSTRAP TOPIC PARTITIONS SECONDS RECORDS_PER_SECOND
 * </pre>
 *
 * Record values are "PARTITION-SEQUENCE", the sequence counting up per partition in send order.
 * At the end (after flush) it prints one JSON line: how many were sent, every acknowledgement
 * as [partition, offset, value], how many sends failed and the first failure.
 */
public final class FailoverProducer {
    private FailoverProducer() {}

    public static void main(String[] argv) throws Exception {
        if (argv.length != 5) {
            System.err.println(
                    "usage: FailoverProducer BOOTSTRAP TOPIC PARTITIONS SECONDS RECORDS_PER_SECOND");
            System.exit(2);
        }
        String topic = argv[1];
        int partitions = Integer.parseInt(argv[2]);
        long seconds = Long.parseLong(argv[3]);
        int rate = Integer.parseInt(argv[4]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, argv[0]);

        List<String> acked = new ArrayList<>();
        AtomicReference<String> firstError = new AtomicReference<>();
        int[] errors = {0};
        long[] sequence = new long[partitions];
        int sent = 0;
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            long start = System.nanoTime();
            long end = start + TimeUnit.SECONDS.toNanos(seconds);
            while (System.nanoTime() < end) {
                long due = (System.nanoTime() - start) * rate / TimeUnit.SECONDS.toNanos(1);
                for (; sent < due; sent++) {
                    int p = sent % partitions;
                    String value = p + "-" + sequence[p]++;
                    producer.send(new ProducerRecord<>(topic, p, null, value), (md, e) -> {
                        synchronized (acked) {
                            if (e == null) {
                                acked.add("[" + md.partition() + ", " + md.offset() + ", \""
                                        + value + "\"]");
                            } else {
                                errors[0]++;
                                firstError.compareAndSet(null, e.toString());
                            }
                        }
                    });
                }
                TimeUnit.MILLISECONDS.sleep(1);
            }
            producer.flush();
        }
        StringJoiner acks = new StringJoiner(", ", "[", "]");
        synchronized (acked) {
            acked.forEach(acks::add);
        }
        String error = firstError.get();
        System.out.println("{\"sent\": " + sent + ", \"acked\": " + acks + ", \"errors\": "
                + errors[0] + ", \"first_error\": "
                + (error == null ? "null" : ClientChecks.quoted(error)) + "}");
    }
}
