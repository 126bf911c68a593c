package dev.kafscale.jvm;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.StringJoiner;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client's transactional producer (a transactional.id, everything else in its
 * defaults) and read_committed / read_uncommitted consumers against a broker.
 *
 * <pre>
 * TransactionChecks commit-abort BOOTSTRAP TOPIC TRANSACTIONAL_ID
 * TransactionChecks fence BOOTSTRAP TOPIC TRANSACTIONAL_ID commit|send
 * TransactionChecks timeout BOOTSTRAP TOPIC TRANSACTIONAL_ID TIMEOUT_MS
 * TransactionChecks consume-transform-produce BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID RECORDS
 * TransactionChecks hold BOOTSTRAP TOPIC TRANSACTIONAL_ID
 * </pre>
 *
 * Topics are created with {@value #PARTITIONS} partitions (hold: one). Records are
 * [partition, offset, value] rows; a read is every record a consumer assigned all partitions
 * from the beginning showed, in the order it showed them, until its position reached the end
 * offsets it was told (under read_committed the last stable offsets). Prints one JSON object on
 * stdout with what happened; the test decides what is right. An unexpected exception is
 * printed to stderr and exits 1.
 *
 * <p>hold commits a transaction, aborts one and leaves a third open, prints a JSON line, then
 * waits for a line on stdin ("commit" or "abort") to end the open one and prints another.
 */
public final class TransactionChecks {
    static final int PARTITIONS = 3;
    private static final Duration WAIT = Duration.ofSeconds(60);
    private static final String USAGE = "usage: TransactionChecks commit-abort BOOTSTRAP TOPIC TXID"
            + " | fence BOOTSTRAP TOPIC TXID commit|send | timeout BOOTSTRAP TOPIC TXID TIMEOUT_MS"
            + " | consume-transform-produce BOOTSTRAP INPUT OUTPUT GROUP TXID RECORDS"
            + " | hold BOOTSTRAP TOPIC TXID";

    private TransactionChecks() {}

    public static void main(String[] argv) {
        try {
            String command = argv.length > 0 ? argv[0] : "";
            int arity = switch (command) {
                case "commit-abort", "hold" -> 4;
                case "fence", "timeout" -> 5;
                case "consume-transform-produce" -> 7;
                default -> -1;
            };
            if (arity < 0 || argv.length != arity) {
                System.err.println(USAGE);
                System.exit(2);
            }
            Map<String, Object> out = switch (command) {
                case "commit-abort" -> commitAbort(argv[1], argv[2], argv[3]);
                case "fence" -> fence(argv[1], argv[2], argv[3], argv[4].equals("send"));
                case "timeout" -> timeout(argv[1], argv[2], argv[3], Integer.parseInt(argv[4]));
                case "hold" -> hold(argv[1], argv[2], argv[3]);
                default -> consumeTransformProduce(argv[1], argv[2], argv[3], argv[4], argv[5],
                        Integer.parseInt(argv[6]));
            };
            System.out.println(json(out));
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    // ---------------------------------------------------------------------------------------
    // clients

    static Properties base(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return p;
    }

    /** A transactional producer: its transactional id, otherwise the defaults. */
    static KafkaProducer<String, String> producer(String bootstrap, String transactionalId,
            Map<String, Object> extra) {
        Properties p = base(bootstrap);
        if (transactionalId != null) {
            p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        }
        p.putAll(extra);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, Map<String, Object> extra) {
        Properties p = base(bootstrap);
        p.putAll(extra);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
    }

    static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> out = new ArrayList<>();
        for (int p = 0; p < n; p++) {
            out.add(new TopicPartition(topic, p));
        }
        return out;
    }

    /** Sends the values to partition i % partitions (the i-th value), waits for every ack. */
    static List<List<Object>> send(KafkaProducer<String, String> producer, String topic,
            List<String> values, int partitions) throws Exception {
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        for (int i = 0; i < values.size(); i++) {
            acks.add(producer.send(new ProducerRecord<>(topic, i % partitions, "k" + i,
                    values.get(i))));
        }
        producer.flush();
        List<List<Object>> rows = new ArrayList<>();
        for (int i = 0; i < values.size(); i++) {
            RecordMetadata m = acks.get(i).get();
            rows.add(List.of(m.partition(), m.offset(), values.get(i)));
        }
        return rows;
    }

    static List<String> values(String prefix, int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(prefix + "-" + i);
        }
        return out;
    }

    static List<List<Object>> labelled(List<List<Object>> rows, String label) {
        List<List<Object>> out = new ArrayList<>();
        for (List<Object> row : rows) {
            List<Object> r = new ArrayList<>(row);
            r.add(label);
            out.add(r);
        }
        return out;
    }

    /**
     * Every record a consumer (no group, {@code isolation}) assigned all partitions from the
     * beginning shows, until its position reaches the end offsets it is told (bounded wait).
     */
    static Map<String, Object> read(String bootstrap, String topic, int n, String isolation) {
        Map<String, Object> out = new LinkedHashMap<>();
        List<List<Object>> rows = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap,
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            List<TopicPartition> tps = partitions(topic, n);
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps, WAIT);
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            while (!reached(c, ends) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    rows.add(List.of(r.partition(), r.offset(), r.value()));
                }
            }
            out.put("records", rows);
            out.put("ends", byPartition(ends));
            out.put("reached_end", reached(c, ends));
        }
        return out;
    }

    static boolean reached(KafkaConsumer<String, String> c, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
            if (c.position(e.getKey(), WAIT) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    /** ListOffsets latest of each partition under {@code isolation}. */
    static Map<String, Object> ends(String bootstrap, String topic, int n, String isolation) {
        try (KafkaConsumer<String, String> c = consumer(bootstrap,
                Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            return byPartition(c.endOffsets(partitions(topic, n), WAIT));
        }
    }

    static Map<String, Object> byPartition(Map<TopicPartition, Long> offsets) {
        Map<String, Object> out = new TreeMap<>();
        offsets.forEach((tp, offset) -> out.put(String.valueOf(tp.partition()), offset));
        return out;
    }

    /** The exception's chain, outermost first: "Type: message <- Cause: message". */
    static String chain(Throwable e) {
        if (e instanceof ExecutionException && e.getCause() != null) {
            e = e.getCause();
        }
        StringBuilder out = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            out.append(out.length() == 0 ? "" : " <- ").append(t.getClass().getSimpleName())
                    .append(": ").append(t.getMessage());
        }
        return out.toString();
    }

    // ---------------------------------------------------------------------------------------
    // scenarios

    /**
     * Five transactions of six records (two per partition): committed, aborted, committed,
     * aborted, committed. Then a read_committed and a read_uncommitted read of the topic.
     */
    static Map<String, Object> commitAbort(String bootstrap, String topic, String txid)
            throws Exception {
        createTopic(bootstrap, topic, PARTITIONS);
        List<List<Object>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> p = producer(bootstrap, txid, Map.of())) {
            p.initTransactions();
            String[] rounds = {"c1", "a1", "c2", "a2", "c3"};
            for (String round : rounds) {
                p.beginTransaction();
                List<List<Object>> rows = send(p, topic, values(round, 6), PARTITIONS);
                if (round.startsWith("c")) {
                    p.commitTransaction();
                    sent.addAll(labelled(rows, "committed"));
                } else {
                    p.abortTransaction();
                    sent.addAll(labelled(rows, "aborted"));
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sent", sent);
        out.put("read_committed", read(bootstrap, topic, PARTITIONS, "read_committed"));
        out.put("read_uncommitted", read(bootstrap, topic, PARTITIONS, "read_uncommitted"));
        return out;
    }

    /**
     * The old producer writes four records to partitions 0 and 1 and leaves its transaction
     * open; a new producer with the same transactional id initialises; the old one's next step
     * (commit, or a send to partition 2, then a commit) fails. The new one commits six records.
     */
    static Map<String, Object> fence(String bootstrap, String topic, String txid, boolean send)
            throws Exception {
        createTopic(bootstrap, topic, PARTITIONS);
        Map<String, Object> out = new LinkedHashMap<>();
        List<List<Object>> sent = new ArrayList<>();
        KafkaProducer<String, String> old = producer(bootstrap, txid, Map.of());
        KafkaProducer<String, String> fresh = producer(bootstrap, txid, Map.of());
        try {
            old.initTransactions();
            old.beginTransaction();
            sent.addAll(labelled(send(old, topic, values("old", 4), 2), "aborted"));
            out.put("ends_old_open", ends(bootstrap, topic, PARTITIONS, "read_uncommitted"));
            out.put("stable_old_open", ends(bootstrap, topic, PARTITIONS, "read_committed"));
            fresh.initTransactions();
            out.put("ends_after_init", ends(bootstrap, topic, PARTITIONS, "read_uncommitted"));
            out.put("stable_after_init", ends(bootstrap, topic, PARTITIONS, "read_committed"));
            String nextError = null;
            String commitError = null;
            if (send) {
                try {
                    old.send(new ProducerRecord<>(topic, 2, "late", "late-0")).get();
                } catch (Exception e) {
                    nextError = chain(e);
                }
            }
            try {
                old.commitTransaction();
            } catch (Exception e) {
                commitError = chain(e);
            }
            if (send) {
                out.put("send_error", nextError);
            }
            out.put("commit_error", commitError);
            fresh.beginTransaction();
            sent.addAll(labelled(send(fresh, topic, values("new", 6), PARTITIONS), "committed"));
            fresh.commitTransaction();
        } finally {
            old.close(Duration.ZERO);
            fresh.close();
        }
        out.put("sent", sent);
        out.put("read_committed", read(bootstrap, topic, PARTITIONS, "read_committed"));
        out.put("read_uncommitted", read(bootstrap, topic, PARTITIONS, "read_uncommitted"));
        return out;
    }

    /**
     * A producer with a short transaction.timeout.ms writes six records and waits (bounded)
     * until the coordinator has aborted its transaction (the last stable offsets catch up with
     * the ends, past a marker); then commits.
     */
    static Map<String, Object> timeout(String bootstrap, String topic, String txid, int timeoutMs)
            throws Exception {
        createTopic(bootstrap, topic, PARTITIONS);
        Map<String, Object> out = new LinkedHashMap<>();
        List<List<Object>> sent = new ArrayList<>();
        try (KafkaProducer<String, String> p = producer(bootstrap, txid,
                Map.of(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeoutMs))) {
            p.initTransactions();
            p.beginTransaction();
            sent.addAll(labelled(send(p, topic, values("timed-out", 6), PARTITIONS), "aborted"));
            out.put("stable_while_open", ends(bootstrap, topic, PARTITIONS, "read_committed"));
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            boolean aborted = false;
            while (!aborted && System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
                Map<String, Object> high = ends(bootstrap, topic, PARTITIONS, "read_uncommitted");
                Map<String, Object> stable = ends(bootstrap, topic, PARTITIONS, "read_committed");
                aborted = high.equals(stable) && high.values().stream()
                        .allMatch(v -> (Long) v == 3L);
            }
            out.put("aborted_by_coordinator", aborted);
            String commitError = null;
            try {
                p.commitTransaction();
            } catch (Exception e) {
                commitError = chain(e);
            }
            out.put("commit_error", commitError);
        }
        out.put("sent", sent);
        out.put("ends", ends(bootstrap, topic, PARTITIONS, "read_uncommitted"));
        out.put("read_committed", read(bootstrap, topic, PARTITIONS, "read_committed"));
        out.put("read_uncommitted", read(bootstrap, topic, PARTITIONS, "read_uncommitted"));
        return out;
    }

    /**
     * A plain producer writes RECORDS values to the input; then a consume-transform-produce
     * loop copies them to the output (same partition, value "out:" + input value), one
     * transaction per poll with the consumed offsets sent to it
     * (sendOffsetsToTransaction(offsets, consumer.groupMetadata())). The first worker commits
     * two transactions, aborts the third (then seeks back to the group's committed offsets),
     * commits two more and leaves the sixth open (its consumer closed, its producer not): it
     * "crashes". A second worker with the same group and transactional id takes over and runs
     * until its positions reach the input's ends; then the first one's commit is tried.
     */
    static Map<String, Object> consumeTransformProduce(String bootstrap, String input,
            String output, String group, String txid, int records) throws Exception {
        createTopic(bootstrap, input, PARTITIONS);
        createTopic(bootstrap, output, PARTITIONS);
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<String, String> plain = producer(bootstrap, null, Map.of())) {
            out.put("input", send(plain, input, values("in", records), PARTITIONS));
        }
        List<TopicPartition> inputs = partitions(input, PARTITIONS);
        Map<TopicPartition, Long> inputEnds;
        try (KafkaConsumer<String, String> c = consumer(bootstrap, Map.of())) {
            inputEnds = c.endOffsets(inputs, WAIT);
        }
        Map<String, Object> settings = Map.of(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false,
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 20);

        List<String> steps = new ArrayList<>();
        KafkaProducer<String, String> zombie = producer(bootstrap, txid, Map.of());
        zombie.initTransactions();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, settings)) {
            c.subscribe(List.of(input));
            String[] plan = {"commit", "commit", "abort", "commit", "commit", "crash"};
            for (String step : plan) {
                ConsumerRecords<String, String> batch = pollSome(c);
                zombie.beginTransaction();
                transform(zombie, c, batch, output);
                steps.add(step + ":" + batch.count());
                switch (step) {
                    case "commit" -> zombie.commitTransaction();
                    case "abort" -> {
                        zombie.abortTransaction();
                        Map<TopicPartition, OffsetAndMetadata> committed =
                                c.committed(c.assignment(), WAIT);
                        for (TopicPartition tp : c.assignment()) {
                            OffsetAndMetadata at = committed.get(tp);
                            if (at == null) {
                                c.seekToBeginning(List.of(tp));
                            } else {
                                c.seek(tp, at.offset());
                            }
                        }
                    }
                    default -> zombie.flush(); // the crash: written, neither committed nor aborted
                }
            }
        }
        out.put("stable_after_crash", ends(bootstrap, output, PARTITIONS, "read_committed"));
        out.put("ends_after_crash", ends(bootstrap, output, PARTITIONS, "read_uncommitted"));

        int transactions = 0;
        try (KafkaProducer<String, String> p = producer(bootstrap, txid, Map.of());
                KafkaConsumer<String, String> c = consumer(bootstrap, settings)) {
            p.initTransactions();
            c.subscribe(List.of(input));
            long deadline = System.currentTimeMillis() + WAIT.toMillis();
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> batch = c.poll(Duration.ofMillis(200));
                if (!batch.isEmpty()) {
                    p.beginTransaction();
                    transform(p, c, batch, output);
                    p.commitTransaction();
                    transactions++;
                }
                if (c.assignment().size() == PARTITIONS && reached(c, inputEnds)) {
                    break;
                }
            }
        }
        steps.add("takeover-commits:" + transactions);
        out.put("steps", steps);
        String zombieError = null;
        try {
            zombie.commitTransaction();
        } catch (Exception e) {
            zombieError = chain(e);
        } finally {
            zombie.close(Duration.ZERO);
        }
        out.put("zombie_commit_error", zombieError);
        try (Admin admin = Admin.create(base(bootstrap))) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Map<TopicPartition, Long> offsets = new HashMap<>();
            committed.forEach((tp, at) -> offsets.put(tp, at == null ? -1L : at.offset()));
            out.put("group_offsets", byPartition(offsets));
        }
        out.put("input_ends", byPartition(inputEnds));
        out.put("read_committed", read(bootstrap, output, PARTITIONS, "read_committed"));
        out.put("read_uncommitted", read(bootstrap, output, PARTITIONS, "read_uncommitted"));
        return out;
    }

    /** Polls until a non-empty batch arrives (bounded). */
    static ConsumerRecords<String, String> pollSome(KafkaConsumer<String, String> c) {
        long deadline = System.currentTimeMillis() + WAIT.toMillis();
        while (System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> batch = c.poll(Duration.ofMillis(200));
            if (!batch.isEmpty()) {
                return batch;
            }
        }
        throw new IllegalStateException("no records within " + WAIT);
    }

    /** Sends each record's transformation and the batch's next offsets to the transaction. */
    static void transform(KafkaProducer<String, String> p, KafkaConsumer<String, String> c,
            ConsumerRecords<String, String> batch, String output) {
        Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
        for (ConsumerRecord<String, String> r : batch) {
            p.send(new ProducerRecord<>(output, r.partition(), r.key(), "out:" + r.value()));
            next.put(new TopicPartition(r.topic(), r.partition()),
                    new OffsetAndMetadata(r.offset() + 1));
        }
        p.sendOffsetsToTransaction(next, c.groupMetadata());
    }

    /** Commits one transaction, aborts one, leaves one open until told on stdin. */
    static Map<String, Object> hold(String bootstrap, String topic, String txid)
            throws Exception {
        createTopic(bootstrap, topic, 1);
        List<List<Object>> sent = new ArrayList<>();
        Map<String, Object> out = new LinkedHashMap<>();
        try (KafkaProducer<String, String> p = producer(bootstrap, txid, Map.of())) {
            p.initTransactions();
            p.beginTransaction();
            sent.addAll(labelled(send(p, topic, values("committed", 5), 1), "committed"));
            p.commitTransaction();
            p.beginTransaction();
            sent.addAll(labelled(send(p, topic, values("aborted", 5), 1), "aborted"));
            p.abortTransaction();
            p.beginTransaction();
            sent.addAll(labelled(send(p, topic, values("open", 5), 1), "open"));
            Map<String, Object> ready = new LinkedHashMap<>();
            ready.put("open", true);
            ready.put("sent", sent);
            System.out.println(json(ready));
            System.out.flush();
            BufferedReader stdin = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line = stdin.readLine();
            String end = line == null ? "abort" : line.trim();
            if (end.equals("commit")) {
                p.commitTransaction();
            } else {
                p.abortTransaction();
            }
            out.put("ended", end);
        }
        out.put("sent", sent);
        return out;
    }

    // ---------------------------------------------------------------------------------------
    // JSON

    /** JSON of strings, numbers, booleans, null, lists and maps of those (string keys). */
    static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof String s) {
            return ClientChecks.quoted(s);
        }
        if (v instanceof Map<?, ?> m) {
            StringJoiner fields = new StringJoiner(", ", "{", "}");
            m.forEach((k, x) -> fields.add(ClientChecks.quoted(String.valueOf(k)) + ": " + json(x)));
            return fields.toString();
        }
        if (v instanceof Collection<?> c) {
            StringJoiner items = new StringJoiner(", ", "[", "]");
            c.forEach(x -> items.add(json(x)));
            return items.toString();
        }
        return v.toString();
    }
}
