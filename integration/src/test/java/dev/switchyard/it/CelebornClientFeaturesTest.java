package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.apache.spark.HashPartitioner;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.sql.SparkSession;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import scala.Tuple2;

/**
 * What a Celeborn 0.6 client relies on beyond the 0.5 protocol: worker tags, the end-to-end
 * integrity check, congestion control and the quota that interrupts a running shuffle. Each test
 * has its own server. Tests of a feature the client on the classpath lacks (the 0.5 jars of the
 * same tag) are skipped by an assumption on that client's own configuration keys; nothing else is.
 */
@Tag("celeborn")
@Timeout(value = 6, unit = java.util.concurrent.TimeUnit.MINUTES)
class CelebornClientFeaturesTest {

  static final String WRITER = SparkHarness.celebornWriters().get(0);

  @org.junit.jupiter.api.BeforeAll
  static void whichClient() throws Exception {
    Class<?> conf = Class.forName("org.apache.celeborn.common.CelebornConf");
    System.out.println("[suite] CelebornClientFeaturesTest: client from "
        + conf.getProtectionDomain().getCodeSource().getLocation() + ", writer " + WRITER);
  }

  /** Whether the client's CelebornConf has {@code method} (0.6 added the keys tested here). */
  static boolean clientHas(String method) {
    try {
      Class.forName("org.apache.celeborn.common.CelebornConf").getMethod(method);
      return true;
    } catch (ReflectiveOperationException e) {
      return false;
    }
  }

  static double metric(SwitchyardProcess s, String metric) throws Exception {
    return SwitchyardProcess.metricSum(s.adminGet("/metrics"), metric, "");
  }

  /** The stock client, {@code extra} Spark settings added. */
  static SparkHarness.Client celeborn(String label, String... extra) {
    SparkHarness.Client plain = SparkHarness.celeborn(WRITER);
    return new SparkHarness.Client() {
      public String label() {
        return plain.label() + " " + label;
      }

      public String sparkMaster() {
        return plain.sparkMaster();
      }

      public SparkConf configure(SparkConf conf, SwitchyardProcess s) {
        SparkConf c = plain.configure(conf, s);
        for (int i = 0; i < extra.length; i += 2) {
          c.set(extra[i], extra[i + 1]);
        }
        return c;
      }
    };
  }

  static SparkConf conf(String app, SparkHarness.Client client, SwitchyardProcess s) {
    return client.configure(SparkHarness.baseConf(app, client.sparkMaster()), s);
  }

  // ---------------------------------------------------------------- tags

  @Test
  void tagsExpressionSelectsTaggedWorkers() throws Exception {
    assumeTrue(clientHas("tagsExpr"), "client lacks celeborn.tags.tagsExpr (0.6+)");
    try (SwitchyardProcess s = SwitchyardProcess.start(
        "celeborn-tags", "256MiB", true, "", "[node]\ntags = [\"ssd\", \"env=it\"]\n")) {
      SparkHarness.compareWithVanilla(
          "tagsMatch/" + WRITER, s, celeborn("tags ssd,env=it", "spark.celeborn.tags.tagsExpr", "env=it, ssd"),
          Jobs::repartitionReduceByKey, (e, a) -> Compare.sameMap("tags matching", e, a));
      assertEquals(0, metric(s, "switchyard_celeborn_tags_unmatched_total"));

      // No worker carries "hdd": RequestSlots answers WORKER_EXCLUDED and, fallback forbidden,
      // the job fails without storing anything.
      long before = s.appendedBytes();
      SparkConf unmatched =
          conf("tags-hdd", celeborn("tags hdd", "spark.celeborn.tags.tagsExpr", "ssd,hdd"), s);
      assertThrows(Throwable.class, () -> SparkHarness.runApp(unmatched, Jobs::repartitionReduceByKey));
      s.assertAlive();
      assertEquals(before, s.appendedBytes(), "nothing stored for a shuffle no worker matched");
      assertTrue(metric(s, "switchyard_celeborn_tags_unmatched_total") >= 1, s.logTail(30));
    }
  }

  // ---------------------------------------------------------------- integrity check

  /** A 64-byte run of 'z' in every value: where the corruption test flips one byte. */
  static final String MARK = "z".repeat(64);

  /** 40k (key, value) records in 4 maps, partitioned into 5 reducers, not yet read. */
  static JavaPairRDD<Integer, String> markedShuffle(SparkSession spark) {
    return Jobs.jsc(spark)
        .parallelize(Jobs.range(4), 4)
        .flatMapToPair(p -> {
          List<Tuple2<Integer, String>> out = new ArrayList<>();
          for (int i = 0; i < 10_000; i++) {
            int n = p * 10_000 + i;
            out.add(new Tuple2<>(n % 97, "v" + n + "-" + MARK));
          }
          return out.iterator();
        })
        .partitionBy(new HashPartitioner(5));
  }

  /** Sum of the values' hash codes: any changed byte changes it. */
  static long digest(JavaPairRDD<Integer, String> shuffled) {
    return shuffled.map(t -> (long) t._2().hashCode()).reduce(Long::sum);
  }

  static final String[] INTEGRITY = {
    "spark.celeborn.client.shuffle.integrityCheck.enabled", "true",
    // Stored batches carry the serialized records as they are, so one flipped byte inside a value
    // is still a readable record (LZ4's own checksum would catch it first).
    "spark.celeborn.client.shuffle.compression.codec", "none",
  };

  @Test
  void integrityCheckedJobEqualsVanilla() throws Exception {
    assumeTrue(clientHas("clientShuffleIntegrityCheckEnabled"), "client lacks the integrity check (0.6+)");
    try (SwitchyardProcess s = SwitchyardProcess.startWithCeleborn("celeborn-integrity", "256MiB")) {
      SparkHarness.compareWithVanilla(
          "integrity/" + WRITER, s, celeborn("integrity", INTEGRITY), Jobs::combineByKey,
          (e, a) -> Compare.sameMap("combineByKey with integrity check", e, a));
    }
  }

  /**
   * One byte of one stored batch flipped on disk between two reads of the same shuffle: with the
   * check the second read fails with the client's CommitMetadata mismatch; without it (the control)
   * the same corruption silently changes the result.
   */
  @Test
  void corruptedBatchFailsTheIntegrityCheck() throws Exception {
    assumeTrue(clientHas("clientShuffleIntegrityCheckEnabled"), "client lacks the integrity check (0.6+)");
    try (SwitchyardProcess s = SwitchyardProcess.startWithCeleborn("celeborn-corrupt", "256MiB")) {
      long expected = SparkHarness.runApp(
          SparkHarness.baseConf("corrupt-vanilla", SparkHarness.CELEBORN_MASTER),
          spark -> digest(markedShuffle(spark))).value();

      // Control: no check, the flipped byte goes unnoticed.
      String[] unchecked = {"spark.celeborn.client.shuffle.compression.codec", "none"};
      long[] control = SparkHarness.runApp(
          conf("corrupt-unchecked", celeborn("no integrity", unchecked), s),
          spark -> corruptBetweenReads(s, markedShuffle(spark), null)).value();
      assertEquals(expected, control[0], "first read equals vanilla");
      assertNotEquals(expected, control[1], "the corruption changes an unchecked result");

      String[] failure = new String[1];
      long[] checked = SparkHarness.runApp(
          conf("corrupt-checked", celeborn("integrity", INTEGRITY), s),
          spark -> corruptBetweenReads(s, markedShuffle(spark), failure)).value();
      assertEquals(expected, checked[0], "first read equals vanilla");
      assertTrue(failure[0] != null && failure[0].contains("CommitMetadata mismatch"),
          "second read failed with the client's integrity error, got: " + failure[0]);
      s.assertAlive();
    }
  }

  /**
   * Reads {@code shuffled} (its map stage runs once), flips one byte of a stored value, reads it
   * again. Returns both digests; when {@code failure} is given, the second read's failure is put
   * there instead (its digest then 0).
   */
  static long[] corruptBetweenReads(
      SwitchyardProcess s, JavaPairRDD<Integer, String> shuffled, String[] failure) {
    long first = digest(shuffled);
    try {
      flipOneMarkedByte(s.dataDir());
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
    if (failure == null) {
      return new long[] {first, digest(shuffled)};
    }
    try {
      return new long[] {first, digest(shuffled)};
    } catch (Exception e) { // SparkException is checked, though Scala throws it undeclared
      StringBuilder all = new StringBuilder();
      for (Throwable t = e; t != null; t = t.getCause()) {
        all.append(t).append('\n');
      }
      failure[0] = all.toString();
      return new long[] {first, 0};
    }
  }

  /**
   * Turns one 'z' of the first marker found in the data files into 'y'. (Kryo sets the top bit
   * of a string's last byte, so half the marker is searched for.)
   */
  static void flipOneMarkedByte(Path dataDir) throws IOException {
    byte[] mark = MARK.substring(32).getBytes(java.nio.charset.StandardCharsets.US_ASCII);
    List<Path> files;
    try (Stream<Path> walk = Files.walk(dataDir)) {
      files = walk.filter(Files::isRegularFile).filter(p -> p.toString().endsWith(".data")).toList();
    }
    for (Path f : files) {
      byte[] bytes = Files.readAllBytes(f);
      int at = indexOf(bytes, mark);
      if (at >= 0) {
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw")) {
          raf.seek(at + mark.length / 2);
          raf.write('y');
        }
        System.out.println("[integrity] flipped byte " + (at + mark.length / 2) + " of " + f);
        return;
      }
    }
    throw new AssertionError("no stored batch holds the marker; data files: " + files);
  }

  static int indexOf(byte[] hay, byte[] needle) {
    outer:
    for (int i = 0; i + needle.length <= hay.length; i++) {
      for (int j = 0; j < needle.length; j++) {
        if (hay[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    return -1;
  }

  // ---------------------------------------------------------------- congestion control

  /**
   * A worker past its (low) high watermark answers pushes PUSH_DATA_SUCCESS_PRIMARY_CONGESTED; a
   * SLOWSTART client slows down on it and the result still equals Spark's own shuffle. (0.5
   * clients read the same answer: no assumption.)
   */
  @Test
  void congestedWorkerSlowsTheClientAndTheJobEqualsVanilla() throws Exception {
    String congestion =
        "[celeborn.congestion]\nenabled = true\nhigh_watermark = 0.01\nlow_watermark = 0.005\n";
    try (SwitchyardProcess s = SwitchyardProcess.start("celeborn-congested", "256MiB", true, "", congestion)) {
      SparkHarness.compareWithVanilla(
          "congested/" + WRITER, s,
          celeborn("SLOWSTART",
              "spark.celeborn.client.push.limit.strategy", "SLOWSTART",
              "spark.celeborn.client.push.slowStart.initialSleepTime", "100ms",
              "spark.celeborn.client.push.slowStart.maxSleepTime", "100ms"),
          Jobs::repartitionReduceByKey, (e, a) -> Compare.sameMap("congested", e, a));
      double congested = metric(s, "switchyard_celeborn_congested_replies_total");
      System.out.println("[congestion] congested replies: " + congested);
      assertTrue(congested >= 1, "the worker answered pushes congested\n" + s.logTail(30));
    }
  }

  // ---------------------------------------------------------------- quota interrupt

  /** 3 maps of 150k records with 120-byte random values (about 55 MB), into 8 partitions. */
  static long quotaJob(SparkSession spark) {
    return Jobs.jsc(spark)
        .parallelize(Jobs.range(3), 3)
        .flatMapToPair(p -> {
          java.util.Random r = new java.util.Random(p);
          List<Tuple2<Integer, byte[]>> out = new ArrayList<>();
          for (int i = 0; i < 150_000; i++) {
            byte[] v = new byte[120];
            r.nextBytes(v);
            out.add(new Tuple2<>(r.nextInt(), v));
          }
          return out.iterator();
        })
        .partitionBy(new HashPartitioner(8))
        .count();
  }

  /**
   * The user's quota ({@code storage.apps.max_user_bytes}) refuses no push, so a running shuffle
   * grows past it; the master's heartbeat reply then says {@code available: false} and a 0.6
   * driver with {@code celeborn.quota.interruptShuffle.enabled} cancels the map stage with its
   * quota message (the client does so only with stage rerun on, its default). The control run,
   * interrupt off, finishes.
   */
  @Test
  void quotaInterruptsARunningShuffle() throws Exception {
    assumeTrue(clientHas("quotaInterruptShuffleEnabled"), "client lacks celeborn.quota.interruptShuffle (0.6+)");
    String quota = "[storage.apps]\nmax_user_bytes = \"4MiB\"\n";
    try (SwitchyardProcess s = SwitchyardProcess.start("celeborn-quota", "256MiB", true, "", quota)) {
      String[] heartbeat = {"spark.celeborn.client.application.heartbeatInterval", "500ms"};
      SparkHarness.Timed<Long> control =
          SparkHarness.runApp(conf("quota-control", celeborn("no interrupt", heartbeat), s), CelebornClientFeaturesTest::quotaJob);
      assertEquals(450_000L, control.value(), "without the interrupt the job finishes");
      System.out.println("[quota] control job " + control.jobMillis() + " ms");

      SparkConf interrupting = conf("quota-interrupt", celeborn("interrupt",
          "spark.celeborn.client.application.heartbeatInterval", "500ms",
          "spark.celeborn.quota.interruptShuffle.enabled", "true",
          // The driver cancels only the stages of shuffles it mapped to Spark's, which it does
          // with stage rerun on (its default; the harness turns it off).
          "spark.celeborn.client.spark.stageRerun.enabled", "true"), s);
      Throwable t = assertThrows(Throwable.class, () -> SparkHarness.runApp(interrupting, CelebornClientFeaturesTest::quotaJob));
      StringBuilder all = new StringBuilder();
      for (Throwable c = t; c != null; c = c.getCause()) {
        all.append(c).append('\n');
      }
      assertTrue(all.toString().contains("storage quota exceeded"), "failed with the quota message, got: " + all);
      s.assertAlive();
    }
  }
}
