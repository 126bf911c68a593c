package dev.kafscale.jvm;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.KStream;

/**
 * A Kafka Streams application with processing.guarantee=exactly_once_v2, run until a line
 * arrives on stdin (or stdin closes), then closed, leaving its group.
 *
 * <pre>
 * StreamsEosChecks stateless|stateful BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR [STALL_ON]
 * </pre>
 *
 * stateless: drops values starting "skip", upper-cases the rest. stateful: counts records per
 * value (a repartition topic, a count store with its changelog; the cache off, so every count
 * goes downstream as it changes). Each output record is first sent to OUTPUT, then counted as
 * handled. With STALL_ON, the stream thread stops for good right after sending the output of
 * the input value STALL_ON (its transaction open, that output in it), printing a line
 * "STALLED" on stdout: the test kills the JVM there. The last line on stdout is a JSON object:
 * the records handled, the state the application ended in and its first uncaught error.
 */
public final class StreamsEosChecks {
    private StreamsEosChecks() {}

    public static void main(String[] argv) throws Exception {
        if (argv.length != 6 && argv.length != 7) {
            System.err.println("usage: StreamsEosChecks stateless|stateful BOOTSTRAP"
                    + " APPLICATION_ID INPUT OUTPUT STATE_DIR [STALL_ON]");
            System.exit(2);
        }
        boolean stateful = argv[0].equals("stateful");
        String stallOn = argv.length == 7 ? argv[6] : null;
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, argv[1]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, argv[2]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, argv[5]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // The run after a kill -9 joins the group the killed member is still in until its
        // session times out: the broker's smallest session timeout, so that is soon.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);

        AtomicInteger handled = new AtomicInteger();
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> input = builder.stream(argv[3]);
        KStream<String, String> output;
        if (stateful) {
            output = input.selectKey((k, v) -> v)
                    .groupByKey()
                    .count()
                    .toStream()
                    .mapValues(String::valueOf);
        } else {
            output = input.filter((k, v) -> !v.startsWith("skip")).mapValues(v -> v.toUpperCase());
        }
        // Children run in the order they were added: the record is sent, then handled.
        output.to(argv[4]);
        output.foreach((k, v) -> {
            handled.incrementAndGet();
            String source = stateful ? k : v;
            if (stallOn != null && source.equalsIgnoreCase(stallOn)) {
                System.out.println("STALLED");
                System.out.flush();
                try {
                    Thread.sleep(Long.MAX_VALUE);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        });

        AtomicReference<Throwable> error = new AtomicReference<>();
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.setUncaughtExceptionHandler(e -> {
                error.compareAndSet(null, e);
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.start();
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
                    .readLine();
            streams.close(CloseOptions.groupMembershipOperation(
                    CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                    .withTimeout(Duration.ofSeconds(60)));
            out.put("state", streams.state().toString());
        }
        out.put("handled", handled.get());
        Throwable e = error.get();
        out.put("error", e == null ? null : TransactionChecks.chain(e));
        System.out.println(TransactionChecks.json(out));
    }
}
