package dev.kafscale.jvm;

import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Open-loop paced producer using the Java client's DEFAULT producer settings.
 *
 * <pre>
 * PacedProducer --bootstrap HOST:PORT --topic T --rate-mb R --seconds S
 *               [--value-bytes 1024] [--warmup-seconds 1] [--partitions N]
 * </pre>
 *
 * Every 1 ms tick it sends all records due by then at R MB/s (MB = 10^6 bytes). A blocking
 * send() (buffer full) just makes the loop fall behind. Latency = send() call to callback.
 * Records whose send() started during warm-up are not measured. The measured wall time runs
 * from the end of warm-up until flush() returns, so achieved_mb_s counts acknowledged bytes.
 * Prints one JSON line on stdout; diagnostics go to stderr.
 */
public final class PacedProducer {
    static final String KAFKA_CLIENTS_VERSION = "4.4.0";
    private static final int POOL_SIZE = 64;
    private static final long TICK_NS = TimeUnit.MILLISECONDS.toNanos(1);

    private PacedProducer() {}

    static final class Args {
        String bootstrap;
        String topic;
        double rateMb = Double.NaN;
        double seconds = Double.NaN;
        int valueBytes = 1024;
        double warmupSeconds = 1.0;
        Integer partitions;
    }

    static final class UsageException extends Exception {
        UsageException(String msg) {
            super(msg);
        }
    }

    /** Latency samples appended from the producer's single I/O thread. */
    static final class LongList {
        long[] data = new long[1 << 16];
        int size;

        void add(long v) {
            if (size == data.length) {
                data = Arrays.copyOf(data, data.length * 2);
            }
            data[size++] = v;
        }
    }

    private static final String USAGE =
            "usage: PacedProducer --bootstrap HOST:PORT --topic T --rate-mb R --seconds S"
                    + " [--value-bytes 1024] [--warmup-seconds 1] [--partitions N]";

    static Args parse(String[] argv) throws UsageException {
        Args a = new Args();
        for (int i = 0; i < argv.length; i++) {
            String flag = argv[i];
            if (flag.equals("-h") || flag.equals("--help")) {
                throw new UsageException("help");
            }
            String val;
            int eq = flag.indexOf('=');
            if (flag.startsWith("--") && eq > 0) {
                val = flag.substring(eq + 1);
                flag = flag.substring(0, eq);
            } else {
                if (i + 1 >= argv.length) {
                    throw new UsageException("missing value for " + flag);
                }
                val = argv[++i];
            }
            try {
                switch (flag) {
                    case "--bootstrap" -> a.bootstrap = val;
                    case "--topic" -> a.topic = val;
                    case "--rate-mb" -> a.rateMb = Double.parseDouble(val);
                    case "--seconds" -> a.seconds = Double.parseDouble(val);
                    case "--value-bytes" -> a.valueBytes = Integer.parseInt(val);
                    case "--warmup-seconds" -> a.warmupSeconds = Double.parseDouble(val);
                    case "--partitions" -> a.partitions = Integer.parseInt(val);
                    default -> throw new UsageException("unknown argument " + flag);
                }
            } catch (NumberFormatException e) {
                throw new UsageException("bad number for " + flag + ": " + val);
            }
        }
        if (a.bootstrap == null || a.bootstrap.isBlank()) {
            throw new UsageException("--bootstrap is required");
        }
        if (a.topic == null || a.topic.isBlank()) {
            throw new UsageException("--topic is required");
        }
        if (!(a.rateMb > 0) || Double.isInfinite(a.rateMb)) {
            throw new UsageException("--rate-mb must be a positive number");
        }
        if (!(a.seconds > 0) || Double.isInfinite(a.seconds)) {
            throw new UsageException("--seconds must be a positive number");
        }
        if (a.valueBytes < 0) {
            throw new UsageException("--value-bytes must be >= 0");
        }
        if (!(a.warmupSeconds >= 0) || Double.isInfinite(a.warmupSeconds)) {
            throw new UsageException("--warmup-seconds must be >= 0");
        }
        if (a.partitions != null && a.partitions < 1) {
            throw new UsageException("--partitions must be >= 1");
        }
        return a;
    }

    public static void main(String[] argv) {
        Args a;
        try {
            a = parse(argv);
        } catch (UsageException e) {
            if (!e.getMessage().equals("help")) {
                System.err.println("error: " + e.getMessage());
            }
            System.err.println(USAGE);
            System.exit(e.getMessage().equals("help") ? 0 : 2);
            return;
        }
        System.out.println(run(a));
        System.out.flush();
    }

    static String run(Args a) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a.bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        Random rnd = new Random();
        byte[][] pool = new byte[POOL_SIZE][];
        for (int i = 0; i < POOL_SIZE; i++) {
            pool[i] = new byte[a.valueBytes];
            rnd.nextBytes(pool[i]);
        }

        // Records per nanosecond; a record accounts for at least 1 byte so 0-byte values pace too.
        double recordsPerNs = a.rateMb * 1e6 / Math.max(1, a.valueBytes) / 1e9;
        LongList latencies = new LongList();
        AtomicLong errors = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>();
        AtomicLong acked = new AtomicLong();

        long sent = 0;
        long measureStart;
        long measureEnd;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            long t0 = System.nanoTime();
            long warmupNs = (long) (a.warmupSeconds * 1e9);
            measureStart = t0 + warmupNs;
            long end = measureStart + (long) (a.seconds * 1e9);
            long nextProgress = t0 + TimeUnit.SECONDS.toNanos(1);
            int partition = 0;

            long now = t0;
            while (now < end) {
                long due = (long) ((now - t0) * recordsPerNs);
                while (sent < due && (now = System.nanoTime()) < end) {
                    byte[] value = pool[(int) (sent % POOL_SIZE)];
                    ProducerRecord<byte[], byte[]> rec;
                    if (a.partitions != null) {
                        rec = new ProducerRecord<>(a.topic, partition, null, value);
                        partition = (partition + 1) % a.partitions;
                    } else {
                        rec = new ProducerRecord<>(a.topic, value);
                    }
                    long start = System.nanoTime();
                    boolean measured = start >= measureStart;
                    Callback cb = (RecordMetadata md, Exception ex) -> {
                        if (ex != null) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, ex.getClass().getName() + ": " + ex.getMessage());
                        } else {
                            acked.incrementAndGet();
                            if (measured) {
                                latencies.add(System.nanoTime() - start);
                            }
                        }
                    };
                    try {
                        producer.send(rec, cb);
                    } catch (RuntimeException ex) {
                        errors.incrementAndGet();
                        firstError.compareAndSet(null, ex.getClass().getName() + ": " + ex.getMessage());
                    }
                    sent++;
                }
                now = System.nanoTime();
                if (now >= nextProgress) {
                    System.err.printf(Locale.ROOT, "[jvm-producer] t=%.1fs sent=%d acked=%d errors=%d%n",
                            (now - t0) / 1e9, sent, acked.get(), errors.get());
                    nextProgress += TimeUnit.SECONDS.toNanos(1);
                }
                if (now < end) {
                    long nextTick = now + TICK_NS - ((now - t0) % TICK_NS);
                    LockSupport.parkNanos(Math.min(nextTick, end) - now);
                    now = System.nanoTime();
                }
            }
            producer.flush();
            measureEnd = System.nanoTime();
            System.err.printf(Locale.ROOT, "[jvm-producer] done: sent=%d acked=%d errors=%d%n",
                    sent, acked.get(), errors.get());
        }
        // close() joined the I/O thread, so the latency samples are safely visible here.

        int n = latencies.size;
        long[] lat = Arrays.copyOf(latencies.data, n);
        Arrays.sort(lat);
        double seconds = (measureEnd - measureStart) / 1e9;
        long bytes = (long) n * a.valueBytes;
        double achieved = seconds > 0 ? bytes / 1e6 / seconds : 0.0;

        StringBuilder sb = new StringBuilder(256);
        sb.append('{');
        sb.append("\"client\":\"java\"");
        sb.append(",\"kafka_clients\":\"").append(KAFKA_CLIENTS_VERSION).append('"');
        sb.append(",\"offered_mb_s\":").append(num(a.rateMb));
        sb.append(",\"records\":").append(n);
        sb.append(",\"bytes\":").append(bytes);
        sb.append(",\"seconds\":").append(num(round(seconds, 3)));
        sb.append(",\"achieved_mb_s\":").append(num(round(achieved, 3)));
        sb.append(",\"p50_ms\":").append(pct(lat, 50));
        sb.append(",\"p99_ms\":").append(pct(lat, 99));
        sb.append(",\"max_ms\":").append(n == 0 ? "null" : num(round(lat[n - 1] / 1e6, 3)));
        sb.append(",\"errors\":").append(errors.get());
        String fe = firstError.get();
        sb.append(",\"first_error\":").append(fe == null ? "null" : jsonString(fe));
        sb.append('}');
        return sb.toString();
    }

    /** Nearest-rank percentile of sorted nanosecond samples, in ms; null when empty. */
    static String pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return "null";
        }
        int rank = (int) Math.ceil(p / 100.0 * sorted.length);
        int idx = Math.min(sorted.length - 1, Math.max(0, rank - 1));
        return num(round(sorted[idx] / 1e6, 3));
    }

    static double round(double v, int digits) {
        double f = Math.pow(10, digits);
        return Math.round(v * f) / f;
    }

    static String num(double v) {
        if (Double.isNaN(v) || Double.isInfinite(v)) {
            return "null";
        }
        if (v == Math.rint(v) && Math.abs(v) < 1e15) {
            return Long.toString((long) v);
        }
        return Double.toString(v);
    }

    static String jsonString(String s) {
        StringBuilder sb = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (c < 0x20) {
                        sb.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
        return sb.append('"').toString();
    }
}
