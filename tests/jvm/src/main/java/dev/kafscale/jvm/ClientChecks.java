package dev.kafscale.jvm;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.StringJoiner;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client against a broker, each client with nothing set but its bootstrap address,
 * serializers and (for a consumer) its group: what a user of the reference client gets.
 *
 * <pre>
 * ClientChecks produce-consume BOOTSTRAP TOPIC RECORDS [PROPERTY=VALUE ...]
 * ClientChecks admin BOOTSTRAP TOPIC [PROPERTY=VALUE ...]
 * ClientChecks scram-user BOOTSTRAP USER PASSWORD [PROPERTY=VALUE ...]
 * </pre>
 *
 * The properties (security settings) go to every client it makes. Prints one JSON object on
 * stdout with what it saw; the test decides what is right. An exception is printed to stderr
 * and exits 1.
 */
public final class ClientChecks {
    private static final Duration WAIT = Duration.ofSeconds(60);
    private static final int PARTITIONS = 3;
    private static final String USAGE = "usage: ClientChecks produce-consume BOOTSTRAP TOPIC"
            + " RECORDS | admin BOOTSTRAP TOPIC | scram-user BOOTSTRAP USER PASSWORD,"
            + " each followed by PROPERTY=VALUE settings for its clients";

    /** The settings every client gets besides its bootstrap address. */
    private static final Properties EXTRA = new Properties();

    private ClientChecks() {}

    public static void main(String[] argv) {
        try {
            String command = argv.length > 0 ? argv[0] : "";
            int positional = switch (command) {
                case "produce-consume", "scram-user" -> 4;
                case "admin" -> 3;
                default -> -1;
            };
            if (positional < 0 || argv.length < positional) {
                System.err.println(USAGE);
                System.exit(2);
            }
            for (String setting : Arrays.copyOfRange(argv, positional, argv.length)) {
                String[] kv = setting.split("=", 2);
                EXTRA.put(kv[0], kv.length == 2 ? kv[1] : "");
            }
            Map<String, Object> out = switch (command) {
                case "produce-consume" ->
                        produceConsume(argv[1], argv[2], Integer.parseInt(argv[3]));
                case "admin" -> admin(argv[1], argv[2]);
                default -> scramUser(argv[1], argv[2], argv[3]);
            };
            System.out.println(json(out));
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    static Properties props(String bootstrap) {
        Properties p = new Properties();
        p.putAll(EXTRA);
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap) {
        return new KafkaProducer<>(props(bootstrap), new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties p = props(bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    /**
     * A consumer in the defaults (offsets reset to the latest, so it joins before anything is
     * written) and an idempotent producer in the defaults: every record arrives once, in order
     * per partition; the group commits; seeking back reads them again; offsetsForTimes finds a
     * record by its timestamp.
     */
    static Map<String, Object> produceConsume(String bootstrap, String topic, int records)
            throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
        }
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, topic + "-group");
                KafkaProducer<String, String> producer = producer(bootstrap)) {
            Set<TopicPartition> assigned = new HashSet<>();
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    assigned.removeAll(partitions);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    assigned.addAll(partitions);
                }
            });
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (assigned.size() < PARTITIONS && System.nanoTime() < deadline) {
                consumer.poll(Duration.ofMillis(100));
            }
            out.put("assigned", assigned.size());
            // The reset to "latest" happens at the first fetch position lookup: wait for it, so
            // records written next are not skipped.
            for (TopicPartition tp : assigned) {
                consumer.position(tp);
            }

            List<RecordMetadata> sent = new ArrayList<>();
            long firstTimestamp = System.currentTimeMillis() - 60_000;
            for (int i = 0; i < records; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(
                        topic, null, firstTimestamp + i, "key-" + (i % 10), "value-" + i);
                sent.add(producer.send(r).get());
            }
            out.put("sent", sent.size());

            Map<String, Integer> seen = new HashMap<>();
            Map<Integer, Long> lastOffset = new HashMap<>();
            Map<String, Integer> lastValueOfKey = new HashMap<>();
            int received = 0;
            int duplicates = 0;
            int outOfOrder = 0;
            deadline = System.nanoTime() + WAIT.toNanos();
            while (received < records && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    received++;
                    if (seen.merge(r.value(), 1, Integer::sum) > 1) {
                        duplicates++;
                    }
                    Long last = lastOffset.put(r.partition(), r.offset());
                    int n = Integer.parseInt(r.value().substring("value-".length()));
                    Integer lastN = lastValueOfKey.put(r.key(), n);
                    if ((last != null && r.offset() <= last) || (lastN != null && n <= lastN)) {
                        outOfOrder++;
                    }
                }
            }
            out.put("received", received);
            out.put("distinct", seen.size());
            out.put("duplicates", duplicates);
            out.put("out_of_order", outOfOrder);

            consumer.commitSync();
            Map<TopicPartition, Long> ends = consumer.endOffsets(assigned);
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
            boolean committedAtEnd = true;
            for (TopicPartition tp : assigned) {
                OffsetAndMetadata c = committed.get(tp);
                committedAtEnd &= c != null && c.offset() == ends.get(tp);
            }
            out.put("committed_at_end", committedAtEnd);

            consumer.seekToBeginning(assigned);
            int reread = 0;
            deadline = System.nanoTime() + WAIT.toNanos();
            while (reread < records && System.nanoTime() < deadline) {
                reread += consumer.poll(Duration.ofMillis(200)).count();
            }
            out.put("reread_after_seek", reread);

            RecordMetadata middle = sent.get(records / 2);
            TopicPartition middleTp = new TopicPartition(topic, middle.partition());
            Map<TopicPartition, OffsetAndTimestamp> found =
                    consumer.offsetsForTimes(Map.of(middleTp, middle.timestamp()));
            OffsetAndTimestamp at = found.get(middleTp);
            out.put("offsets_for_times_found", at != null && at.offset() == middle.offset());
        }
        return out;
    }

    /**
     * AdminClient in its defaults: the cluster, topic creation with a config, describing the
     * topic (DescribeTopicPartitions), configs read and changed, partitions added, records
     * deleted, groups listed, the topic deleted.
     */
    static Map<String, Object> admin(String bootstrap, String topic) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(props(bootstrap))) {
            DescribeClusterResult cluster = admin.describeCluster();
            out.put("cluster_id_set", cluster.clusterId().get() != null);
            out.put("nodes", cluster.nodes().get().size());
            out.put("controller_set", cluster.controller().get() != null);

            NewTopic created = new NewTopic(topic, 2, (short) 1)
                    .configs(Map.of("retention.ms", "3600000"));
            admin.createTopics(List.of(created)).all().get();
            TopicDescription described =
                    admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            out.put("partitions", described.partitions().size());

            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            out.put("retention_ms", configValue(admin, resource, "retention.ms"));
            AlterConfigOp set = new AlterConfigOp(
                    new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(set))).all().get();
            out.put("retention_ms_altered", configValue(admin, resource, "retention.ms"));

            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get();
            out.put("partitions_increased",
                    admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic)
                            .partitions().size());

            try (KafkaProducer<String, String> producer = producer(bootstrap)) {
                for (int i = 0; i < 10; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, null, "v" + i)).get();
                }
            }
            TopicPartition first = new TopicPartition(topic, 0);
            long low = admin.deleteRecords(Map.of(first, RecordsToDelete.beforeOffset(5)))
                    .lowWatermarks().get(first).get().lowWatermark();
            out.put("low_watermark", low);

            try (KafkaConsumer<String, String> consumer = consumer(bootstrap, topic + "-group")) {
                consumer.assign(List.of(first));
                consumer.seekToBeginning(List.of(first));
                out.put("first_offset_after_delete", consumer.position(first));
                // Committed as the position (auto-commit, on by default, commits it again at
                // close).
                consumer.seek(first, 7);
                consumer.commitSync();
            }
            Map<TopicPartition, OffsetAndMetadata> groupOffsets = admin
                    .listConsumerGroupOffsets(topic + "-group").partitionsToOffsetAndMetadata().get();
            out.put("group_offset", groupOffsets.get(first).offset());

            admin.deleteTopics(List.of(topic)).all().get();
            boolean gone = false;
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (!gone && System.nanoTime() < deadline) {
                gone = !admin.listTopics().names().get().contains(topic);
                if (!gone) {
                    TimeUnit.MILLISECONDS.sleep(100);
                }
            }
            out.put("deleted", gone);
        }
        return out;
    }

    /**
     * Stores a SCRAM-SHA-512 credential for a user through AlterUserScramCredentials and reads
     * back the mechanisms DescribeUserScramCredentials lists for it.
     */
    static Map<String, Object> scramUser(String bootstrap, String user, String password)
            throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(props(bootstrap))) {
            ScramCredentialInfo info = new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192);
            admin.alterUserScramCredentials(
                    List.of(new UserScramCredentialUpsertion(user, info, password))).all().get();
            UserScramCredentialsDescription described =
                    admin.describeUserScramCredentials(List.of(user)).description(user).get();
            StringJoiner mechanisms = new StringJoiner(",");
            for (ScramCredentialInfo i : described.credentialInfos()) {
                mechanisms.add(i.mechanism().mechanismName() + ":" + i.iterations());
            }
            out.put("credentials", mechanisms.toString());
        }
        return out;
    }

    static String configValue(Admin admin, ConfigResource resource, String name) throws Exception {
        Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
        ConfigEntry entry = config.get(name);
        return entry == null ? null : entry.value();
    }

    /** A JSON string. */
    static String quoted(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    /** The JSON of a flat map of strings, numbers and booleans. */
    static String json(Map<String, Object> map) {
        StringJoiner fields = new StringJoiner(", ", "{", "}");
        for (Map.Entry<String, Object> e : map.entrySet()) {
            Object v = e.getValue();
            String value = v == null ? "null"
                    : v instanceof String s ? quoted(s)
                    : v.toString();
            fields.add("\"" + e.getKey() + "\": " + value);
        }
        return fields.toString();
    }
}
