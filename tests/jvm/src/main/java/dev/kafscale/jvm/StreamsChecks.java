package dev.kafscale.jvm;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.KStream;

/**
 * A Kafka Streams application in its defaults (at-least-once, offsets committed on close), run
 * until its topology has handled a number of records, then closed, leaving its group.
 *
 * <pre>
 * StreamsChecks stateless|stateful BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR RECORDS
 * </pre>
 *
 * stateless: drops values starting "skip", upper-cases the rest. stateful: counts records per
 * key (a KTable, so a changelog topic, and a repartition topic after selecting the value as the
 * key) and writes the counts. Prints one JSON line: how many records the topology handled, the
 * state it ended in and the first uncaught error, if any.
 */
public final class StreamsChecks {
    private static final long WAIT_MS = 90_000;

    private StreamsChecks() {}

    public static void main(String[] argv) throws Exception {
        if (argv.length != 7) {
            System.err.println("usage: StreamsChecks stateless|stateful BOOTSTRAP APPLICATION_ID"
                    + " INPUT OUTPUT STATE_DIR RECORDS");
            System.exit(2);
        }
        boolean stateful = argv[0].equals("stateful");
        int records = Integer.parseInt(argv[6]);
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, argv[1]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, argv[2]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, argv[5]);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        if (stateful) {
            // Every count goes downstream as it changes, not when the cache is flushed.
            props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        }

        AtomicInteger handled = new AtomicInteger();
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> input = builder.stream(argv[3]);
        if (stateful) {
            input.selectKey((k, v) -> v)
                    .groupByKey()
                    .count()
                    .toStream()
                    .peek((k, v) -> handled.incrementAndGet())
                    .mapValues(String::valueOf)
                    .to(argv[4]);
        } else {
            input.filter((k, v) -> !v.startsWith("skip"))
                    .peek((k, v) -> handled.incrementAndGet())
                    .mapValues(v -> v.toUpperCase())
                    .to(argv[4]);
        }

        AtomicReference<Throwable> error = new AtomicReference<>();
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.setUncaughtExceptionHandler(e -> {
                error.compareAndSet(null, e);
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.start();
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (handled.get() < records && error.get() == null
                    && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
            }
            // Leaving the group on close (Streams does not by default), as an application
            // restarted on purpose does: its next run need not wait for this member's session
            // to time out before the group rebalances.
            streams.close(CloseOptions.groupMembershipOperation(
                    CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                    .withTimeout(Duration.ofSeconds(60)));
            out.put("state", streams.state().toString());
        }
        out.put("handled", handled.get());
        Throwable e = error.get();
        StringBuilder causes = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            causes.append(causes.length() == 0 ? "" : " <- ").append(t.getClass().getSimpleName())
                    .append(": ").append(t.getMessage());
        }
        out.put("error", e == null ? null : causes.toString());
        System.out.println(ClientChecks.json(out));
    }
}
