package dev.switchyard.it;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import scala.Tuple2;
import scala.Tuple3;

/**
 * One benchmark run in its own JVM, for {@link SparkBenchTest}: a workload through one shuffle
 * (Spark's own, or a stock client against switchyard), timed by stage.
 *
 * <pre>
 * java ... dev.switchyard.it.SparkBench CLIENT ENDPOINT WORKLOAD OUT_FILE
 *   CLIENT    vanilla | uniffle-GRPC | uniffle-GRPC_NETTY | celeborn-HASH | celeborn-SORT
 *   ENDPOINT  coordinator quorum (uniffle) or master endpoint (celeborn); "-" for vanilla
 *   WORKLOAD  groupby: {@code switchyard.bench.gib} GiB (default 1) from 16 map tasks of a long
 *             key and a 200-byte value (words and numbers, compressible as text fields are), hash-partitioned into 64 partitions, each reducer
 *             checksumming what it reads;
 *             sql: TPC-DS-like queries over a generated star schema ({@link BenchSql}), 16
 *             shuffle partitions, broadcast joins off: many small exchanges
 * </pre>
 *
 * <p>OUT_FILE (written at the end, atomically), one {@code key=value} per line: {@code wall_ms}
 * (the workload, session start excluded), {@code shuffle_written}, {@code shuffle_read} (bytes,
 * from task metrics), {@code stages}, {@code map_ms} and {@code reduce_ms} (groupby: the two
 * stages' submission-to-completion times), {@code query.<name>_ms} (sql), and {@code
 * checksum}: a digest of the results, equal for every client when the shuffle is right.
 */
public final class SparkBench {

  static final int MAPS = 16;
  static final int PARTITIONS = 64;
  static final int VALUE_BYTES = 200;
  /** Bytes a record takes in the shuffle, roughly (Kryo: key, length, value). */
  static final int RECORD_BYTES = 8 + 2 + VALUE_BYTES;

  private SparkBench() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: SparkBench CLIENT ENDPOINT WORKLOAD OUT_FILE");
      System.exit(2);
    }
    try {
      run(args[0], args[1], args[2], Paths.get(args[3]));
      System.exit(0);
    } catch (Throwable t) {
      System.err.println("[bench:" + args[0] + "] FAILED");
      t.printStackTrace();
      System.exit(1);
    }
  }

  static SparkConf conf(String client, String endpoint, String workload) {
    SparkConf conf = MixedJobMain.conf(client, endpoint).setAppName("bench-" + workload + "-" + client);
    // The benchmark's own settings over the test harness's: its fail-fast timeouts do not
    // change a healthy run; the Uniffle writer and reader buffers go back to the client's
    // defaults, which is what users run.
    conf.remove("spark.rss.writer.buffer.size");
    conf.remove("spark.rss.writer.buffer.spill.size");
    conf.remove("spark.rss.client.read.buffer.size");
    conf.remove("spark.rss.index.read.limit");
    conf.set("spark.driver.memory", "2g");
    if (workload.equals("sql")) {
      conf.set("spark.sql.shuffle.partitions", "16")
          .set("spark.sql.autoBroadcastJoinThreshold", "-1")
          .set("spark.sql.adaptive.enabled", "false");
    }
    return conf;
  }

  static void run(String client, String endpoint, String workload, Path out) throws Exception {
    SparkSession spark = SparkSession.builder().config(conf(client, endpoint, workload)).getOrCreate();
    SparkHarness.ShuffleBytes bytes = new SparkHarness.ShuffleBytes();
    StageTimes stages = new StageTimes();
    spark.sparkContext().addSparkListener(bytes);
    spark.sparkContext().addSparkListener(stages);
    List<String> lines = new ArrayList<>();
    try {
      long start = System.nanoTime();
      long checksum;
      switch (workload) {
        case "groupby" -> checksum = groupBy(spark, gib());
        case "sql" -> checksum = BenchSql.run(spark, lines);
        case "sql-prepare" -> {
          BenchSql.prepare(spark);
          checksum = 0;
        }
        default -> throw new IllegalArgumentException("unknown workload " + workload);
      }
      long wall = (System.nanoTime() - start) / 1_000_000;
      spark.sparkContext().listenerBus().waitUntilEmpty(10_000);
      lines.add("wall_ms=" + wall);
      lines.add("checksum=" + Long.toHexString(checksum));
      lines.add("shuffle_written=" + bytes.written.sum());
      lines.add("shuffle_read=" + bytes.read.sum());
      lines.add("stages=" + stages.millis.size());
      if (workload.equals("groupby")) {
        // Stage 0 maps, stage 1 reduces (one job).
        lines.add("map_ms=" + stages.millis.getOrDefault(0, -1L));
        lines.add("reduce_ms=" + stages.millis.getOrDefault(1, -1L));
        for (int stage : new int[] {0, 1}) {
          long[] t = stages.tasks.getOrDefault(stage, new long[4]);
          // tasks, summed run time, CPU time, and shuffle wait (write time in the map stage,
          // fetch wait in the reduce stage), ms
          lines.add("stage" + stage + "_tasks=" + t[0] + "," + t[1] + "," + t[2] + "," + t[3]);
        }
      }
      System.out.printf("[bench:%s] %s: %d ms%n", client, workload, wall);
    } finally {
      spark.stop();
    }
    Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
    Files.write(tmp, lines, StandardCharsets.UTF_8);
    Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  static double gib() {
    return Double.parseDouble(System.getProperty("switchyard.bench.gib", "1"));
  }

  /**
   * Submission to completion of every stage, by stage id; and per stage the tasks' run time,
   * CPU time and the time they waited for shuffle data (ms, summed over tasks).
   */
  static final class StageTimes extends SparkListener {
    final Map<Integer, Long> millis = new ConcurrentHashMap<>();
    final Map<Integer, long[]> tasks = new ConcurrentHashMap<>();

    @Override
    public void onTaskEnd(org.apache.spark.scheduler.SparkListenerTaskEnd end) {
      org.apache.spark.executor.TaskMetrics m = end.taskMetrics();
      if (m == null) {
        return;
      }
      long[] t = tasks.computeIfAbsent(end.stageId(), k -> new long[4]);
      synchronized (t) {
        t[0] += 1;
        t[1] += m.executorRunTime();
        t[2] += m.executorCpuTime() / 1_000_000;
        t[3] += m.shuffleReadMetrics().fetchWaitTime() + m.shuffleWriteMetrics().writeTime() / 1_000_000;
      }
    }

    @Override
    public void onStageCompleted(SparkListenerStageCompleted done) {
      StageInfo s = done.stageInfo();
      if (s.submissionTime().isDefined() && s.completionTime().isDefined()) {
        millis.put(s.stageId(), (Long) s.completionTime().get() - (Long) s.submissionTime().get());
      }
    }
  }

  /**
   * The groupby workload: {@code gib} GiB of (long, 200 bytes) records from {@link #MAPS} map
   * tasks, hash-partitioned into {@link #PARTITIONS}; every reducer sums a hash of each record
   * it reads. Returns the sum over partitions of (partition, count, hash sum) mixed, and checks
   * the record count.
   */
  static long groupBy(SparkSession spark, double gib) {
    long records = (long) (gib * (1L << 30) / RECORD_BYTES);
    long perMap = (records + MAPS - 1) / MAPS;
    List<Integer> maps = new ArrayList<>();
    for (int i = 0; i < MAPS; i++) {
      maps.add(i);
    }
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    List<Tuple3<Integer, Long, Long>> parts = jsc.parallelize(maps, MAPS)
        .flatMapToPair(m -> new Generator(0xBE7C4L * 31 + m, Math.max(0, Math.min(perMap, records - m * perMap))))
        .partitionBy(new HashPartitioner(PARTITIONS))
        .mapPartitionsWithIndex((idx, it) -> {
          long n = 0;
          long h = 0;
          while (it.hasNext()) {
            Tuple2<Long, byte[]> t = it.next();
            n++;
            h += Jobs.recordHash(t._1(), t._2());
          }
          return Collections.singletonList(new Tuple3<>(idx, n, h)).iterator();
        }, true)
        .collect();
    long total = 0;
    long digest = 0;
    for (Tuple3<Integer, Long, Long> p : parts) {
      total += p._2();
      digest = digest * 31 + p._1() * 1_000_003L + p._2() * 7919L + p._3();
    }
    if (total != records) {
      throw new AssertionError("groupby: " + total + " records after the shuffle, " + records + " before");
    }
    return digest;
  }

  /** A row's contribution to a result checksum (order-independent when summed). */
  static long rowHash(Row r) {
    long h = 0x9E3779B97F4A7C15L;
    for (int i = 0; i < r.length(); i++) {
      Object v = r.get(i);
      long x = v == null ? 0
          : v instanceof java.math.BigDecimal d ? d.stripTrailingZeros().toPlainString().hashCode()
          : v instanceof Double d ? Math.round(d * 1000) : v.hashCode();
      h = (h ^ x) * 0xff51afd7ed558ccdL;
      h ^= h >>> 33;
    }
    return h;
  }

  /** Words the values are made of: shuffle data compresses (LZ4 takes these to about a third). */
  static final byte[][] WORDS = words();

  private static byte[][] words() {
    String[] w = ("order item customer store web catalog return sale price quantity discount profit "
        + "street city state zip country email phone date time week month year shipped pending "
        + "cancelled delivered gold silver bronze standard express ground air").split(" ");
    byte[][] out = new byte[w.length][];
    for (int i = 0; i < w.length; i++) {
      out[i] = (w[i] + ' ').getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    }
    return out;
  }

  /**
   * One map task's records, made lazily from {@code seed}: a random key and a 200-byte value of
   * random words and numbers, which compresses as shuffle data of records with text fields does.
   */
  static final class Generator implements Iterator<Tuple2<Long, byte[]>> {
    private final SplittableRandom r;
    private final long n;
    private long i;

    Generator(long seed, long n) {
      this.r = new SplittableRandom(seed);
      this.n = n;
    }

    @Override
    public boolean hasNext() {
      return i < n;
    }

    @Override
    public Tuple2<Long, byte[]> next() {
      if (i >= n) {
        throw new NoSuchElementException();
      }
      i++;
      byte[] value = new byte[VALUE_BYTES];
      int at = 0;
      while (at < VALUE_BYTES) {
        byte[] piece;
        if (r.nextInt(4) == 0) {
          piece = (Long.toString(r.nextLong(1_000_000_000L)) + ' ').getBytes(java.nio.charset.StandardCharsets.US_ASCII);
        } else {
          piece = WORDS[r.nextInt(WORDS.length)];
        }
        int len = Math.min(piece.length, VALUE_BYTES - at);
        System.arraycopy(piece, 0, value, at, len);
        at += len;
      }
      return new Tuple2<>(r.nextLong(), value);
    }
  }
}
