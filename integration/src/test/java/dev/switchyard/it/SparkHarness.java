package dev.switchyard.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.BiConsumer;
import java.util.function.Function;
import org.apache.spark.SparkConf;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.sql.SparkSession;

/**
 * Builds SparkSessions (Spark's own shuffle, or the stock Uniffle client against switchyard) and
 * runs one job on each, one session at a time, then compares the results.
 *
 * <p>System properties: {@code uniffle.client.type} (GRPC | GRPC_NETTY, default GRPC),
 * {@code switchyard.vanillaOnly=true} (no server: the job runs twice on Spark's own shuffle and
 * the two results are compared, which checks that the job is deterministic), {@code
 * uniffle.client.jar} / {@code uniffle.client.version} (which client; printed in the timing lines).
 */
public final class SparkHarness {

  public static final String RSS_MANAGER = "org.apache.spark.shuffle.RssShuffleManager";

  private SparkHarness() {}

  public static boolean vanillaOnly() {
    return Boolean.getBoolean("switchyard.vanillaOnly");
  }

  public static String clientType() {
    String t = System.getProperty("uniffle.client.type", "GRPC").trim();
    if (t.isEmpty()) {
      t = "GRPC";
    }
    if (!t.equals("GRPC") && !t.equals("GRPC_NETTY")) {
      throw new IllegalArgumentException("uniffle.client.type must be GRPC or GRPC_NETTY, not " + t);
    }
    return t;
  }

  /** The client jar given with -Duniffle.client.jar, or null when the Maven one is used. */
  public static String clientJar() {
    String jar = System.getProperty("uniffle.client.jar", "");
    return jar.isEmpty() ? null : jar;
  }

  /** "maven:0.9.2" or "jar:<file name>", for log lines. */
  public static String clientLabel() {
    String jar = clientJar();
    if (jar != null) {
      return "jar:" + Paths.get(jar).getFileName();
    }
    return "maven:" + System.getProperty("uniffle.client.version", "?");
  }

  /** Settings shared by both sides: local[4] on loopback, no UI, Kryo. */
  public static SparkConf baseConf(String appName) {
    Path localDir = Paths.get("target", "spark-local").toAbsolutePath();
    try {
      Files.createDirectories(localDir);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
    return new SparkConf()
        .setMaster("local[4]")
        .setAppName(appName)
        .set("spark.ui.enabled", "false")
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.driver.bindAddress", "127.0.0.1")
        .set("spark.local.dir", localDir.toString())
        // The Uniffle client requires a relocatable serializer; use the same one on both sides.
        .set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .set("spark.sql.shuffle.partitions", "200")
        // local mode: a failed task fails the job at once (the default, stated for clarity).
        .set("spark.task.maxFailures", "1");
  }

  /**
   * The stock Uniffle client against {@code coordinatorQuorum}. Retry and timeout settings are
   * lowered (as Uniffle's own ITs do) so that a broken server fails a job within about a minute
   * instead of the defaults' many minutes.
   */
  public static SparkConf withUniffle(SparkConf conf, String coordinatorQuorum, String clientType) {
    return conf.set("spark.shuffle.manager", RSS_MANAGER)
        .set("spark.shuffle.sort.io.plugin.class", "org.apache.spark.shuffle.RssShuffleDataIo")
        .set("spark.rss.coordinator.quorum", coordinatorQuorum)
        .set("spark.rss.storage.type", "MEMORY_LOCALFILE")
        .set("spark.rss.client.type", clientType)
        // Smaller buffers than the defaults, as in Uniffle's ITs: more blocks, more reads.
        .set("spark.rss.writer.buffer.size", "4m")
        .set("spark.rss.writer.buffer.spill.size", "32m")
        .set("spark.rss.client.read.buffer.size", "1m")
        .set("spark.rss.index.read.limit", "100")
        // Fail fast-ish. retry.max * retry.interval.max must be <= send.check.timeout.ms.
        .set("spark.rss.client.retry.max", "10")
        .set("spark.rss.client.retry.interval.max", "1000")
        .set("spark.rss.client.send.check.timeout.ms", "30000")
        .set("spark.rss.client.send.check.interval.ms", "1000")
        .set("spark.rss.heartbeat.interval", "2000")
        // Default 3 x 65 s when the coordinator has no server to assign.
        .set("spark.rss.client.assignment.retry.times", "3")
        .set("spark.rss.client.assignment.retry.interval", "2000")
        .set("spark.rss.client.rpc.timeout.ms", "60000")
        .set("spark.rss.client.unregister.request.timeout.sec", "5");
  }

  /** Runs {@code job} on a fresh SparkSession built from {@code conf}, then stops it. */
  public static <T> Timed<T> runApp(SparkConf conf, Function<SparkSession, T> job) {
    SparkSession.clearActiveSession();
    SparkSession.clearDefaultSession();
    long start = System.nanoTime();
    SparkSession spark = SparkSession.builder().config(conf).getOrCreate();
    ShuffleBytes bytes = new ShuffleBytes();
    spark.sparkContext().addSparkListener(bytes);
    long started = System.nanoTime();
    try {
      T result = job.apply(spark);
      long done = System.nanoTime();
      // listener events are delivered asynchronously
      try {
        spark.sparkContext().listenerBus().waitUntilEmpty(10_000);
      } catch (java.util.concurrent.TimeoutException e) {
        System.err.println("listener bus not drained: shuffle byte counts may be low");
      }
      return new Timed<>(
          result, (started - start) / 1_000_000, (done - started) / 1_000_000, bytes.written.sum(), bytes.read.sum());
    } finally {
      spark.stop();
      SparkSession.clearActiveSession();
      SparkSession.clearDefaultSession();
    }
  }

  /**
   * A job's result, how long the session start and the job itself took, and the shuffle bytes
   * Spark's task metrics report as written and read (remote + local).
   */
  public record Timed<T>(T value, long startupMillis, long jobMillis, long shuffleBytesWritten, long shuffleBytesRead) {}

  /** Adds up shuffle write/read bytes over all tasks of a SparkContext. */
  static final class ShuffleBytes extends SparkListener {
    final LongAdder written = new LongAdder();
    final LongAdder read = new LongAdder();

    @Override
    public void onTaskEnd(SparkListenerTaskEnd taskEnd) {
      TaskMetrics m = taskEnd.taskMetrics();
      if (m != null) {
        written.add(m.shuffleWriteMetrics().bytesWritten());
        read.add(m.shuffleReadMetrics().totalBytesRead());
      }
    }
  }

  /**
   * Runs the job on Spark's own shuffle, then through {@code server} with the Uniffle client, and
   * compares. With {@code switchyard.vanillaOnly=true} ({@code server} is then null) the second run
   * is Spark's own shuffle again.
   */
  public static <T> void compareWithVanilla(
      String jobName, SwitchyardProcess server, Function<SparkSession, T> job, BiConsumer<T, T> assertSame) {
    SparkConf vanillaConf = baseConf("vanilla-" + jobName);
    Timed<T> expected = runApp(vanillaConf, job);
    String otherLabel;
    Timed<T> actual;
    if (vanillaOnly()) {
      otherLabel = "vanilla again";
      actual = runApp(baseConf("vanilla2-" + jobName), job);
    } else {
      String type = clientType();
      otherLabel = "rss " + type + " (" + clientLabel() + ")";
      SparkConf rssConf = withUniffle(baseConf("rss-" + jobName), server.coordinatorQuorum(), type);
      long appendedBefore = server.appendedBytes();
      try {
        actual = runApp(rssConf, job);
      } catch (RuntimeException | Error e) {
        if (server != null && !server.isAlive()) {
          throw new AssertionError(jobName + ": job failed and switchyard is dead\n" + server.logTail(80), e);
        }
        throw new AssertionError(
            jobName + " failed with the Uniffle client (" + otherLabel + "); server log: "
                + (server == null ? "-" : server.logFile()), e);
      }
      server.assertAlive();
      // The shuffle really went through Switchyard: its store took at least
      // the bytes Spark reports as written (retries may add duplicates).
      long appended = server.appendedBytes() - appendedBefore;
      if (appended <= 0 || appended < actual.shuffleBytesWritten()) {
        throw new AssertionError(String.format(
            "%s: switchyard stored %d bytes but Spark wrote %d shuffle bytes", jobName, appended,
            actual.shuffleBytesWritten()));
      }
    }
    String line = String.format(
        "%-14s vanilla %6d ms (+%5d ms start, shuffle w/r %s/%s) | %s %6d ms (+%5d ms start, shuffle w/r %s/%s)",
        jobName, expected.jobMillis(), expected.startupMillis(),
        mb(expected.shuffleBytesWritten()), mb(expected.shuffleBytesRead()),
        otherLabel, actual.jobMillis(), actual.startupMillis(),
        mb(actual.shuffleBytesWritten()), mb(actual.shuffleBytesRead()));
    System.out.println("[timing] " + line);
    appendTiming(line);
    assertSame.accept(expected.value(), actual.value());
  }

  static String mb(long bytes) {
    return String.format("%.1f MB", bytes / 1e6);
  }

  static void appendTiming(String line) {
    try {
      Path f = Paths.get("target", "switchyard-it-timings.txt");
      Files.createDirectories(f.getParent());
      Files.writeString(f, line + "\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    } catch (IOException e) {
      System.err.println("could not write timings: " + e);
    }
  }
}
