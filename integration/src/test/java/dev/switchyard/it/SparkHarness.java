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
 * Builds SparkSessions (Spark's own shuffle, or the stock Uniffle or Celeborn client against
 * switchyard) and runs one job on each, one session at a time, then compares the results.
 *
 * <p>System properties: {@code uniffle.client.type} (GRPC | GRPC_NETTY, default GRPC),
 * {@code switchyard.vanillaOnly=true} (no server: the job runs twice on Spark's own shuffle and
 * the two results are compared, which checks that the job is deterministic), {@code
 * uniffle.client.jar} / {@code uniffle.client.version} (which client; printed in the timing lines).
 */
public final class SparkHarness {

  public static final String RSS_MANAGER = "org.apache.spark.shuffle.RssShuffleManager";
  public static final String CELEBORN_MANAGER = "org.apache.spark.shuffle.celeborn.SparkShuffleManager";

  /** Spark master of the Uniffle tests. */
  public static final String UNIFFLE_MASTER = "local[4]";
  /** Spark master of the Celeborn tests (as in Celeborn's own Spark ITs). */
  public static final String CELEBORN_MASTER = "local[2]";

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

  /** The Celeborn client jar given with -Dceleborn.client.jar, or null when the Maven one is used. */
  public static String celebornJar() {
    String jar = System.getProperty("celeborn.client.jar", "");
    return jar.isEmpty() ? null : jar;
  }

  /** "maven:0.5.4" or "jar:<file name>", for log lines. */
  public static String celebornLabel() {
    String jar = celebornJar();
    if (jar != null) {
      return "jar:" + Paths.get(jar).getFileName();
    }
    return "maven:" + System.getProperty("celeborn.client.version", "?");
  }

  /** Celeborn writer modes to run ({@code -Dceleborn.writers}, default {@code HASH,SORT}). */
  public static java.util.List<String> celebornWriters() {
    java.util.List<String> out = new java.util.ArrayList<>();
    for (String w : System.getProperty("celeborn.writers", "HASH,SORT").split(",")) {
      w = w.trim().toUpperCase(java.util.Locale.ROOT);
      if (w.isEmpty()) {
        continue;
      }
      if (!w.equals("HASH") && !w.equals("SORT")) {
        throw new IllegalArgumentException("celeborn.writers: HASH or SORT, not " + w);
      }
      out.add(w);
    }
    return out;
  }

  /** Settings shared by both sides: local[4] on loopback, no UI, Kryo. */
  public static SparkConf baseConf(String appName) {
    return baseConf(appName, UNIFFLE_MASTER);
  }

  /** Settings shared by both sides: {@code master} on loopback, no UI, Kryo. */
  public static SparkConf baseConf(String appName, String master) {
    Path localDir = Paths.get("target", "spark-local").toAbsolutePath();
    try {
      Files.createDirectories(localDir);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
    return new SparkConf()
        .setMaster(master)
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

  /**
   * The stock Celeborn client against the master at {@code masterEndpoint}, with writer {@code
   * HASH} or {@code SORT}. Fallback to Spark's own shuffle is forbidden (the client's default,
   * AUTO, silently falls back when the master reports no worker), and timeouts and retries are
   * lowered so that a broken server fails a job within a minute or two instead of the defaults'
   * many minutes (push 120 s, fetch 600 s, 15 master retries, ...). Keys as in CelebornConf.scala
   * of the 0.5 line; any Celeborn key can be given to Spark with the {@code spark.} prefix.
   */
  public static SparkConf withCeleborn(SparkConf conf, String masterEndpoint, String writerMode) {
    String writer = writerMode.toUpperCase(java.util.Locale.ROOT);
    if (!writer.equals("HASH") && !writer.equals("SORT")) {
      throw new IllegalArgumentException("Celeborn writer must be HASH or SORT, not " + writerMode);
    }
    return conf.set("spark.shuffle.manager", CELEBORN_MANAGER)
        .set("spark.celeborn.master.endpoints", masterEndpoint)
        // Mandatory: without it a master with no usable worker makes the client quietly use
        // Spark's own shuffle, and every comparison would pass.
        .set("spark.celeborn.client.spark.shuffle.fallback.policy", "NEVER")
        .set("spark.celeborn.client.spark.shuffle.writer", writer)
        // One worker: replication must be off (it is by default; stated for clarity).
        .set("spark.celeborn.client.push.replicate.enabled", "false")
        .set("spark.shuffle.service.enabled", "false")
        .set("spark.sql.adaptive.localShuffleReader.enabled", "false")
        // Failures surface as task failures, not as stage retries.
        .set("spark.celeborn.client.spark.fetch.throwsFetchFailure", "false")
        // ---- fail fast
        // Network: connect 10 s -> 5 s; idle connection with requests outstanding 240 s -> 60 s
        // (celeborn.<module>.io.connectionTimeout falls back to this).
        .set("spark.celeborn.network.connect.timeout", "5s")
        .set("spark.celeborn.network.timeout", "60s")
        // RPC: ask 60 s -> 30 s (registerShuffle, reserveSlots, requestPartition asks fall back
        // to it), endpoint lookup 30 s -> 10 s.
        .set("spark.celeborn.rpc.askTimeout", "30s")
        .set("spark.celeborn.rpc.lookupTimeout", "10s")
        // Driver -> master: 15 retries of a 60 s ask by default.
        .set("spark.celeborn.masterClient.rpc.askTimeout", "20s")
        .set("spark.celeborn.masterClient.maxRetries", "3")
        .set("spark.celeborn.client.rpc.maxRetries", "2")
        .set("spark.celeborn.client.registerShuffle.maxRetries", "2")
        .set("spark.celeborn.client.registerShuffle.retryWait", "1s")
        .set("spark.celeborn.client.reserveSlots.maxRetries", "2")
        .set("spark.celeborn.client.reserveSlots.retryWait", "1s")
        .set("spark.celeborn.client.requestCommitFiles.maxRetries", "2")
        // Stage end (commit) and the reducers' wait for it: 240 s / 60 s by default.
        .set("spark.celeborn.client.push.stageEnd.timeout", "60s")
        .set("spark.celeborn.client.rpc.getReducerFileGroup.askTimeout", "60s")
        .set("spark.celeborn.client.rpc.commitFiles.askTimeout", "60s")
        // Push: 120 s per batch, checked every 5 s, 5 revives by default.
        .set("spark.celeborn.client.push.timeout", "30s")
        .set("spark.celeborn.data.push.timeoutCheck.interval", "2s")
        .set("spark.celeborn.client.push.revive.maxRetries", "3")
        // Fetch: 600 s per open stream / chunk, checked every 5 s, 3 tries per replica.
        .set("spark.celeborn.client.fetch.timeout", "30s")
        .set("spark.celeborn.data.fetch.timeoutCheck.interval", "2s")
        .set("spark.celeborn.client.fetch.maxRetriesForEachReplica", "2");
  }

  /** How the compared run reaches switchyard: a label for log lines and the Spark settings. */
  public interface Client {
    String label();

    String sparkMaster();

    SparkConf configure(SparkConf conf, SwitchyardProcess server);
  }

  /** The Uniffle client over {@code uniffle.client.type}, local[4]. */
  public static Client uniffle() {
    String type = clientType();
    return new Client() {
      public String label() {
        return "rss " + type + " (" + clientLabel() + ")";
      }

      public String sparkMaster() {
        return UNIFFLE_MASTER;
      }

      public SparkConf configure(SparkConf conf, SwitchyardProcess server) {
        return withUniffle(conf, server.coordinatorQuorum(), type);
      }
    };
  }

  /** The Celeborn client with writer {@code HASH} or {@code SORT}, local[2]. */
  public static Client celeborn(String writer) {
    return new Client() {
      public String label() {
        return "celeborn " + writer + " (" + celebornLabel() + ")";
      }

      public String sparkMaster() {
        return CELEBORN_MASTER;
      }

      public SparkConf configure(SparkConf conf, SwitchyardProcess server) {
        return withCeleborn(conf, server.celebornMasterEndpoint(), writer);
      }
    };
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
  public static final class ShuffleBytes extends SparkListener {
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
    compareWithVanilla(jobName, server, vanillaOnly() ? null : uniffle(), UNIFFLE_MASTER, job, assertSame);
  }

  /**
   * Runs the job on Spark's own shuffle, then through {@code server} with {@code client}, and
   * compares; both runs use the client's Spark master. With {@code switchyard.vanillaOnly=true}
   * ({@code server} and {@code client} may then be null) the second run is Spark's own shuffle
   * again.
   */
  public static <T> void compareWithVanilla(
      String jobName, SwitchyardProcess server, Client client, Function<SparkSession, T> job,
      BiConsumer<T, T> assertSame) {
    compareWithVanilla(jobName, server, client, client.sparkMaster(), job, assertSame);
  }

  private static <T> void compareWithVanilla(
      String jobName, SwitchyardProcess server, Client client, String master, Function<SparkSession, T> job,
      BiConsumer<T, T> assertSame) {
    SparkConf vanillaConf = baseConf("vanilla-" + jobName, master);
    Timed<T> expected = runApp(vanillaConf, job);
    String otherLabel;
    Timed<T> actual;
    if (vanillaOnly()) {
      otherLabel = "vanilla again";
      actual = runApp(baseConf("vanilla2-" + jobName, master), job);
    } else {
      otherLabel = client.label();
      SparkConf rssConf = client.configure(baseConf("rss-" + jobName, master), server);
      long appendedBefore = server.appendedBytes();
      try {
        actual = runApp(rssConf, job);
      } catch (RuntimeException | Error e) {
        if (!server.isAlive()) {
          throw new AssertionError(jobName + ": job failed and switchyard is dead\n" + server.logTail(80), e);
        }
        throw new AssertionError(
            jobName + " failed with " + otherLabel + "; server log: " + server.logFile(), e);
      }
      server.assertAlive();
      // The shuffle really went through Switchyard (and not, say, through Spark's own shuffle
      // after a silent client fallback): its store took at least the bytes Spark reports as
      // written (retries may add duplicates).
      long appended = server.appendedBytes() - appendedBefore;
      if (appended <= 0 || appended < actual.shuffleBytesWritten()) {
        throw new AssertionError(String.format(
            "%s: switchyard stored %d bytes but Spark wrote %d shuffle bytes (%s)", jobName, appended,
            actual.shuffleBytesWritten(), otherLabel));
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
