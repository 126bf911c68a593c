package dev.kafscale.jvm;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Two Java consumers of one group rebalancing over a topic of four partitions.
 *
 * <pre>
 * GroupChecks BOOTSTRAP TOPIC ASSIGNOR_CLASS STATIC(true|false)
 * </pre>
 *
 * Consumer a joins alone and gets every partition; b joins and they split them; the records
 * written then are read once between them. Without static membership b then leaves and a gets
 * every partition back; with it (group.instance.id), b restarts under the same instance id and
 * gets its partitions back without a rebalance of a. Prints one JSON line of what it saw.
 */
public final class GroupChecks {
    private static final int PARTITIONS = 4;
    private static final int RECORDS = 400;
    private static final long WAIT_MS = 60_000;

    private GroupChecks() {}

    /** A consumer and the partitions its rebalance listener says it holds. */
    static final class Member implements ConsumerRebalanceListener {
        final KafkaConsumer<String, String> consumer;
        final Set<TopicPartition> held = new HashSet<>();
        int revocations;

        Member(String bootstrap, String group, String assignor, String instanceId, String topic) {
            Properties p = ClientChecks.props(bootstrap);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
            // Records are written once both hold their partitions; a partition's position is
            // first looked up when it is fetched, which may come after them.
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            if (instanceId != null) {
                p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
            }
            consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
            consumer.subscribe(List.of(topic), this);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            if (!partitions.isEmpty()) {
                revocations++;
            }
            held.removeAll(partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            onPartitionsRevoked(partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            held.addAll(partitions);
        }
    }

    public static void main(String[] argv) throws Exception {
        if (argv.length != 4) {
            System.err.println("usage: GroupChecks BOOTSTRAP TOPIC ASSIGNOR_CLASS STATIC");
            System.exit(2);
        }
        String bootstrap = argv[0];
        String topic = argv[1];
        String assignor = argv[2];
        boolean isStatic = Boolean.parseBoolean(argv[3]);
        String group = topic + "-group";
        Map<String, Object> out = new LinkedHashMap<>();
        try (Admin admin = Admin.create(ClientChecks.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
        }
        Map<String, Integer> seen = new HashMap<>();
        Member a = new Member(bootstrap, group, assignor, isStatic ? "a" : null, topic);
        Member b = null;
        try {
            pollUntil(List.of(a), seen, () -> a.held.size() == PARTITIONS);
            out.put("a_alone", a.held.size());

            Member joining = new Member(bootstrap, group, assignor, isStatic ? "b" : null, topic);
            b = joining;
            pollUntil(List.of(a, joining), seen, () -> split(a, joining));
            out.put("split", a.held.size() + "+" + joining.held.size());

            try (KafkaProducer<String, String> producer =
                    new KafkaProducer<>(ClientChecks.props(bootstrap), new StringSerializer(),
                            new StringSerializer())) {
                for (int i = 0; i < RECORDS; i++) {
                    producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null, "v" + i));
                }
                producer.flush();
            }
            pollUntil(List.of(a, joining), seen, () -> seen.size() == RECORDS);
            out.put("received", seen.values().stream().mapToInt(Integer::intValue).sum());
            out.put("distinct", seen.size());
            a.consumer.commitSync();
            joining.consumer.commitSync();

            int revocationsBefore = a.revocations;
            Set<TopicPartition> bHeld = new HashSet<>(joining.held);
            joining.consumer.close();
            b = null;
            if (isStatic) {
                // A static member's close does not leave the group: its restart under the same
                // instance id takes its partitions back and a is not rebalanced.
                Member restarted = new Member(bootstrap, group, assignor, "b", topic);
                b = restarted;
                pollUntil(List.of(a, restarted), seen, () -> restarted.held.equals(bHeld));
                out.put("restarted_with_same_partitions", restarted.held.equals(bHeld));
                out.put("a_revocations", a.revocations - revocationsBefore);
                out.put("a_kept", a.held.size() + restarted.held.size() == PARTITIONS);
            } else {
                pollUntil(List.of(a), seen, () -> a.held.size() == PARTITIONS);
                out.put("a_after_b_left", a.held.size());
            }
            out.put("read_twice", seen.values().stream().filter(n -> n > 1).count());
        } finally {
            a.consumer.close();
            if (b != null) {
                b.consumer.close();
            }
        }
        System.out.println(ClientChecks.json(out));
    }

    static boolean split(Member a, Member b) {
        Set<TopicPartition> both = new HashSet<>(a.held);
        both.retainAll(b.held);
        return !a.held.isEmpty() && !b.held.isEmpty() && both.isEmpty()
                && a.held.size() + b.held.size() == PARTITIONS;
    }

    /** Polls every member in turn (a rebalance needs them all polling) until done. */
    static void pollUntil(List<Member> members, Map<String, Integer> seen, BooleanSupplier done) {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (!done.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("not done within " + WAIT_MS + " ms");
            }
            for (Member m : members) {
                for (ConsumerRecord<String, String> r : m.consumer.poll(Duration.ofMillis(50))) {
                    seen.merge(r.value(), 1, Integer::sum);
                }
            }
        }
    }
}
