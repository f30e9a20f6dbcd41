package dev.switchyard.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A skewed Spark job (about 530 MB shuffled, one key holding about 80% of it) through Switchyard
 * with the cold tier on a real S3 server ({@link S3ServerProcess}) and on a real HDFS ({@link
 * MiniDfsProcess}), once with the stock Uniffle client and once with the stock Celeborn client
 * (four runs, each against its own Switchyard). {@code huge_partition_threshold} is 64 MiB, so the
 * hot partition's further spills go to the cold tier. Each run checks:
 *
 * <ul>
 *   <li>the result equals the same job on Spark's own shuffle (computed once, first);
 *   <li>Switchyard's store took at least the shuffle bytes Spark wrote;
 *   <li>during the job, objects appeared on the service's side (the S3 server's bucket
 *       directory; WebHDFS LISTSTATUS), and {@code /api/v1/status} reported cold-tier bytes, at
 *       least the hot partition's size less what may stay on disk or in memory;
 *   <li>the local data directory stayed well below the hot partition's size: at most the other
 *       partitions plus the threshold and one spill;
 *   <li>after the Spark application stopped (the client unregisters), every cold object of the
 *       run is deleted.
 * </ul>
 *
 * <p>Both helper services are child processes started here, and a failure to start them fails
 * the test. System properties: {@code switchyard.cold.records} (default 5M), {@code
 * switchyard.cold.hotFraction} (0.8), {@code switchyard.s3server.bin}, {@code
 * switchyard.minidfs.classpath}, {@code switchyard.minidfs.classes}.
 */
@Tag("cold")
@Timeout(value = 15, unit = TimeUnit.MINUTES)
class ColdTierSkewedShuffleTest {

  static final String MASTER = "local[2]";
  static final String MEMORY = "128MiB";
  static final long MIB = 1L << 20;
  static final long HUGE_THRESHOLD = 64 * MIB;
  static final long SINGLE_BUFFER = 16 * MIB;
  /**
   * How long the cold objects may take to disappear after the application stopped: less than
   * the store's application expiry (60 s by default), so it is the clients' own unregistration
   * (Uniffle unregisterShuffleByAppId, Celeborn ApplicationLost) that must remove them.
   */
  static final long CLEANUP_TIMEOUT_MS = 30_000;

  static Path dir;
  static S3ServerProcess s3;
  static MiniDfsProcess hdfs;
  static SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla;
  static long records;
  static double hotFraction;

  static Stream<Arguments> runs() {
    return Stream.of(
        Arguments.of("uniffle", "s3"),
        Arguments.of("celeborn", "s3"),
        Arguments.of("uniffle", "hdfs"),
        Arguments.of("celeborn", "hdfs"));
  }

  @BeforeAll
  static void startServicesAndRunVanilla() throws Exception {
    records = Jobs.skewedRecords();
    hotFraction = Jobs.hotFraction();
    String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
    dir = Paths.get("target", "cold-tier", stamp).toAbsolutePath();
    Files.createDirectories(dir);
    System.out.printf(
        "[suite] ColdTierSkewedShuffleTest: %d records, hot key share %.2f (partition %d), ~%d MB shuffled, dir %s%n",
        records, hotFraction, Jobs.hotPartition(), records * (Jobs.LARGE_PAYLOAD + 10) / 1_000_000, dir);
    CompletableFuture<MiniDfsProcess> dfs = null;
    if (!SparkHarness.vanillaOnly()) {
      // MiniDFS takes some seconds to come up: start it while the vanilla job runs.
      dfs = CompletableFuture.supplyAsync(() -> {
        try {
          return MiniDfsProcess.start(dir.resolve("minidfs"));
        } catch (java.io.IOException e) {
          throw new java.io.UncheckedIOException(e);
        }
      });
      try {
        s3 = S3ServerProcess.start(dir.resolve("s3"));
      } catch (RuntimeException | java.io.IOException e) {
        closeLater(dfs);
        throw e;
      }
    }
    try {
      vanilla = SparkHarness.runApp(
          SparkHarness.baseConf("vanilla-skewed", MASTER), spark -> Jobs.skewedShuffle(spark, records, hotFraction));
    } catch (RuntimeException | Error e) {
      closeLater(dfs);
      throw e;
    }
    List<Jobs.PartitionDigest> v = vanilla.value();
    long hot = v.get(Jobs.hotPartition()).count();
    System.out.printf(
        "[suite] vanilla: %d ms, shuffle written %s, hot partition %d holds %d of %d records%n",
        vanilla.jobMillis(), SparkHarness.mb(vanilla.shuffleBytesWritten()), Jobs.hotPartition(), hot, records);
    if (hot * 2 < records) {
      throw new AssertionError("the hot key holds " + hot + " of " + records + " records, less than half");
    }
    if (records >= 5_000_000L && vanilla.shuffleBytesWritten() < 500_000_000L) {
      throw new AssertionError("the skewed job shuffled only " + SparkHarness.mb(vanilla.shuffleBytesWritten()));
    }
    if (dfs != null) {
      try {
        hdfs = dfs.join();
      } catch (java.util.concurrent.CompletionException e) {
        throw new IllegalStateException("MiniDFS did not start", e.getCause());
      }
    }
  }

  private static void closeLater(CompletableFuture<MiniDfsProcess> dfs) {
    if (dfs != null) {
      dfs.thenAccept(MiniDfsProcess::close);
    }
  }

  @AfterAll
  static void stopServices() {
    if (s3 != null) {
      s3.close();
      s3 = null;
    }
    if (hdfs != null) {
      hdfs.close();
      hdfs = null;
    }
  }

  @ParameterizedTest(name = "{0} on {1}")
  @MethodSource("runs")
  void skewedJobSendsTheHotPartitionToTheColdTier(String clientName, String backend) throws Exception {
    String run = clientName + "-" + backend;
    String jobName = "skewed/" + run;
    if (SparkHarness.vanillaOnly()) {
      SparkHarness.Timed<List<Jobs.PartitionDigest>> again = SparkHarness.runApp(
          SparkHarness.baseConf("vanilla2-skewed", MASTER), spark -> Jobs.skewedShuffle(spark, records, hotFraction));
      Compare.sameList(jobName + " per-partition (count, hashSum)", vanilla.value(), again.value());
      return;
    }
    ColdStore store = backend.equals("s3") ? s3 : hdfs;
    store.assertAlive();
    String memoryExtra = "single_buffer_threshold = \"" + SINGLE_BUFFER / MIB + "MiB\"\n";
    String cold = store.coldToml(run, HUGE_THRESHOLD / MIB + "MiB");
    SparkHarness.Client client = clientName.equals("uniffle")
        ? SparkHarness.uniffle()
        : SparkHarness.celeborn(SparkHarness.celebornWriters().get(0));

    try (SwitchyardProcess server = SwitchyardProcess.start("cold-" + run, MEMORY, true, memoryExtra, cold)) {
      SparkConf conf = client.configure(SparkHarness.baseConf("rss-skewed-" + run, MASTER), server);
      long appendedBefore = server.appendedBytes();
      Sampler sampler = new Sampler(server, store, run);
      SparkHarness.Timed<List<Jobs.PartitionDigest>> actual;
      try {
        actual = SparkHarness.runApp(conf, spark -> Jobs.skewedShuffle(spark, records, hotFraction));
      } catch (RuntimeException | Error e) {
        sampler.stop();
        server.assertAlive();
        store.assertAlive();
        throw new AssertionError(jobName + " failed with " + client.label() + "; server log: " + server.logFile(), e);
      }
      long stoppedAt = System.nanoTime();
      sampler.stop();
      server.assertAlive();
      store.assertAlive();
      long coldRead = metric(server, "switchyard_cold_read_bytes_total");

      // 1. Same result as Spark's own shuffle.
      Compare.sameList(jobName + " per-partition (count, hashSum)", vanilla.value(), actual.value());

      // 2. The shuffle went through Switchyard.
      long written = actual.shuffleBytesWritten();
      long appended = server.appendedBytes() - appendedBefore;
      if (appended <= 0 || appended < written) {
        throw new AssertionError(String.format(
            "%s: switchyard stored %d bytes but Spark wrote %d shuffle bytes (%s)", jobName, appended, written,
            client.label()));
      }

      // Sizes: the hot partition's share of what was written, the rest, and what the configuration
      // lets stay on local disk: the other partitions, plus the hot partition's bytes up to the
      // threshold and the spill that crosses it (spills of a partition run one at a time, so at
      // most one in flight plus one staged batch of the single-buffer size).
      long hotRecords = actual.value().get(Jobs.hotPartition()).count();
      long hotBytes = written * hotRecords / records;
      long restBytes = written - hotBytes;
      long localBound = restBytes + HUGE_THRESHOLD + 2 * SINGLE_BUFFER + 16 * MIB;
      long minCold = hotBytes - HUGE_THRESHOLD - 2 * SINGLE_BUFFER - parseMib(MEMORY);

      java.util.function.Function<String, String> summary = cleanup -> String.format(
          "%-22s %6d ms (+%5d ms start), shuffle w %s, hot partition %s | max local dir %s (bound %s) | "
              + "max cold objects %d (%s), max status cold %s, max status disk %s, read back from cold %s | cleanup %s",
          jobName, actual.jobMillis(), actual.startupMillis(), SparkHarness.mb(written), SparkHarness.mb(hotBytes),
          SparkHarness.mb(sampler.maxLocal.get()), SparkHarness.mb(localBound), sampler.maxObjects.get(),
          SparkHarness.mb(sampler.maxObjectBytes.get()), SparkHarness.mb(sampler.maxStatusCold.get()),
          SparkHarness.mb(sampler.maxStatusDisk.get()), SparkHarness.mb(coldRead), cleanup);
      sampler.rethrow();

      // 3. The cold tier held the hot partition, seen from the service and from the gateway.
      if (sampler.maxObjects.get() == 0) {
        throw new AssertionError(jobName + ": no object ever appeared in the " + backend + " cold tier\n"
            + summary.apply("-") + "\n" + server.logTail(40));
      }
      if (sampler.maxStatusCold.get() <= 0) {
        throw new AssertionError(jobName + ": /api/v1/status never reported cold-tier bytes\n"
            + summary.apply("-"));
      }
      if (sampler.maxObjectBytes.get() < minCold || sampler.maxStatusCold.get() < minCold) {
        throw new AssertionError(String.format(
            "%s: the cold tier held at most %s (objects) / %s (status), expected at least %s of the %s hot partition%n%s",
            jobName, SparkHarness.mb(sampler.maxObjectBytes.get()), SparkHarness.mb(sampler.maxStatusCold.get()),
            SparkHarness.mb(minCold), SparkHarness.mb(hotBytes), summary.apply("-")));
      }

      // The readers got the cold part of the hot partition back through Switchyard.
      if (coldRead < minCold) {
        throw new AssertionError(String.format(
            "%s: switchyard read %s back from the cold tier, expected at least %s%n%s", jobName,
            SparkHarness.mb(coldRead), SparkHarness.mb(minCold), summary.apply("-")));
      }

      // 4. The hot partition did not land on local disk.
      if (localBound >= hotBytes * 3 / 4) {
        throw new AssertionError(String.format(
            "%s: test set-up: the local-disk bound %s is not clearly below the hot partition (%s); raise"
                + " switchyard.cold.hotFraction", jobName, SparkHarness.mb(localBound), SparkHarness.mb(hotBytes)));
      }
      if (sampler.maxLocal.get() > localBound) {
        throw new AssertionError(String.format(
            "%s: switchyard's data dir reached %s, over the bound %s (hot partition %s): the hot partition went to"
                + " local disk%n%s",
            jobName, SparkHarness.mb(sampler.maxLocal.get()), SparkHarness.mb(localBound), SparkHarness.mb(hotBytes),
            summary.apply("-")));
      }

      // 5. Gone after the application ended.
      long deadline = stoppedAt + TimeUnit.MILLISECONDS.toNanos(CLEANUP_TIMEOUT_MS);
      ColdStore.Listing left = store.list(run);
      SwitchyardProcess.Tiers tiers = server.tiers();
      while ((left.objects() > 0 || tiers.cold() > 0) && System.nanoTime() < deadline) {
        Thread.sleep(250);
        left = store.list(run);
        tiers = server.tiers();
      }
      long cleanupMs = (System.nanoTime() - stoppedAt) / 1_000_000;
      String line = summary.apply(left.objects() == 0 && tiers.cold() == 0 ? cleanupMs + " ms" : "NOT DONE");
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      if (left.objects() > 0 || tiers.cold() > 0) {
        throw new AssertionError(String.format(
            "%s: %d s after the application stopped, %d objects (%s) are still in the cold tier (e.g. %s), status"
                + " cold %d bytes%n%s",
            jobName, CLEANUP_TIMEOUT_MS / 1000, left.objects(), SparkHarness.mb(left.bytes()), left.sample(),
            tiers.cold(), server.logTail(40)));
      }
    }
  }

  /** A counter from {@code /metrics} (0 while it has not been recorded). */
  static long metric(SwitchyardProcess server, String name) throws Exception {
    java.util.regex.Matcher m = java.util.regex.Pattern
        .compile("(?m)^" + name + "(\\{[^}]*\\})?\\s+(\\S+)$")
        .matcher(server.adminGet("/metrics"));
    double sum = 0;
    while (m.find()) {
      sum += Double.parseDouble(m.group(2));
    }
    return (long) sum;
  }

  static long parseMib(String s) {
    return Long.parseLong(s.replace("MiB", "").trim()) * MIB;
  }

  /**
   * Samples, every 200 ms while the job runs: the size of Switchyard's data dir, the run's objects
   * on the cold service (its own listing) and the store's tier bytes from {@code /api/v1/status};
   * keeps the maxima.
   */
  static final class Sampler {
    final AtomicLong maxLocal = new AtomicLong();
    final AtomicInteger maxObjects = new AtomicInteger();
    final AtomicLong maxObjectBytes = new AtomicLong();
    final AtomicLong maxStatusCold = new AtomicLong();
    final AtomicLong maxStatusDisk = new AtomicLong();
    final AtomicInteger samples = new AtomicInteger();
    private final AtomicReference<Throwable> failure = new AtomicReference<>();
    private final AtomicBoolean running = new AtomicBoolean(true);
    private final Thread thread;

    Sampler(SwitchyardProcess server, ColdStore store, String run) {
      thread = new Thread(() -> {
        while (running.get()) {
          try {
            maxLocal.accumulateAndGet(SpillingLargeShuffleTest.DiskSampler.sizeOf(server.dataDir()), Math::max);
            ColdStore.Listing l = store.list(run);
            maxObjects.accumulateAndGet(l.objects(), Math::max);
            maxObjectBytes.accumulateAndGet(l.bytes(), Math::max);
            SwitchyardProcess.Tiers t = server.tiers();
            maxStatusCold.accumulateAndGet(t.cold(), Math::max);
            maxStatusDisk.accumulateAndGet(t.disk(), Math::max);
            samples.incrementAndGet();
          } catch (Throwable e) {
            if (!running.get() || !server.isAlive()) {
              return; // reported by the test
            }
            failure.compareAndSet(null, e);
          }
          try {
            Thread.sleep(200);
          } catch (InterruptedException e) {
            return;
          }
        }
      }, "cold-sampler-" + run);
      thread.setDaemon(true);
      thread.start();
    }

    void stop() throws InterruptedException {
      running.set(false);
      thread.interrupt();
      thread.join(15_000);
    }

    void rethrow() {
      Throwable t = failure.get();
      if (t != null) {
        throw new AssertionError("sampling during the job failed", t);
      }
    }
  }
}
