package dev.switchyard.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The cold tier goes down in the middle of a real Spark job. The skewed job (one key holding 80% of
 * the records) runs with the stock Uniffle client against Switchyard with its cold tier on a real S3
 * server and a low {@code huge_partition_threshold} (16 MiB), so the hot partition's spills go cold
 * early in the map stage. Once the status shows cold bytes, the S3 server is stopped. The next cold
 * write is retried, which marks the tier failing ({@code cold.error_cooldown}, 2 s here), and the
 * hot partition spills to the local disk instead. Once two more map tasks finished (or 10 s), while
 * map tasks still run, the S3 server starts again on the same address with its objects, so the reducers can read the
 * part that went cold before the outage. Map tasks finish while the tier is down, the result equals
 * Spark's own shuffle, no task failed, and the metrics show the failed cold writes.
 *
 * <p>Tag {@code cold} (run-cold-tier.sh). System property {@code switchyard.cold.outage.records}
 * (default 2M).
 */
@Tag("cold")
@Timeout(value = 10, unit = TimeUnit.MINUTES)
class ColdTierOutageSparkTest {

  static final long MIB = 1L << 20;

  /** The sum of {@code name{...op="<op>"...}} in {@code /metrics}. */
  static long counter(SwitchyardProcess server, String name, String op) throws Exception {
    return (long) SwitchyardProcess.metricSum(server.adminGet("/metrics"), name, "op=\"" + op + "\"");
  }

  static boolean waitUntil(BooleanSupplier check, long seconds) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    while (System.nanoTime() < deadline) {
      if (check.getAsBoolean()) {
        return true;
      }
      Thread.sleep(100);
    }
    return check.getAsBoolean();
  }

  /** Counts finished map tasks and failed tasks of any kind. */
  static final class Tasks extends org.apache.spark.scheduler.SparkListener {
    final AtomicInteger mapsDone = new AtomicInteger();
    final AtomicInteger failed = new AtomicInteger();

    @Override
    public void onTaskEnd(org.apache.spark.scheduler.SparkListenerTaskEnd end) {
      if (!(end.reason() instanceof org.apache.spark.Success$)) {
        failed.incrementAndGet();
      } else if (end.taskType().equals("ShuffleMapTask")) {
        mapsDone.incrementAndGet();
      }
    }
  }

  @Test
  void theJobCompletesThroughTheDiskWhileTheColdTierIsDown() throws Exception {
    long records = Long.getLong("switchyard.cold.outage.records", 2_000_000L);
    double hot = 0.8;
    if (SparkHarness.vanillaOnly()) {
      return;
    }
    String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
    Path dir = Paths.get("target", "cold-outage", stamp).toAbsolutePath();
    Files.createDirectories(dir);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla = SparkHarness.runApp(
        SparkHarness.baseConf("vanilla-cold-outage", "local[2]"), spark -> Jobs.skewedShuffle(spark, records, hot));

    try (S3ServerProcess s3 = S3ServerProcess.start(dir.resolve("s3"));
        SwitchyardProcess server = SwitchyardProcess.start(
            "cold-outage", "128MiB", false, "single_buffer_threshold = \"16MiB\"\n",
            s3.coldToml("outage", "16MiB") + "error_cooldown = \"2s\"\n")) {
      SparkConf conf = SparkHarness.uniffle().configure(SparkHarness.baseConf("rss-cold-outage", "local[2]"), server);
      Tasks tasks = new Tasks();
      AtomicLong coldBeforeOutage = new AtomicLong();
      AtomicInteger mapsAtStop = new AtomicInteger(-1);
      AtomicInteger mapsAtRestart = new AtomicInteger(-1);
      AtomicReference<Throwable> outageError = new AtomicReference<>();
      Thread outage = new Thread(() -> {
        try {
          if (!waitUntil(() -> tiers(server).cold() > 0, 180)) {
            throw new AssertionError("the hot partition never went to the cold tier");
          }
          coldBeforeOutage.set(tiers(server).cold());
          mapsAtStop.set(tasks.mapsDone.get());
          s3.close();
          System.out.printf("[suite] cold outage: S3 stopped with %s cold, after %d map tasks%n",
              SparkHarness.mb(coldBeforeOutage.get()), mapsAtStop.get());
          // The first retried write marks the tier failing; huge partitions then spill to the disk.
          if (!waitUntil(() -> !coldHealthy(server), 120)) {
            throw new AssertionError("the cold tier was never reported failing while the S3 server was down");
          }
          int failingAt = tasks.mapsDone.get();
          waitUntil(() -> tasks.mapsDone.get() >= failingAt + 2, 10);
          mapsAtRestart.set(tasks.mapsDone.get());
          s3.restart();
        } catch (Throwable t) {
          outageError.set(t);
        }
      }, "cold-outage");
      outage.start();
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run;
      try {
        run = SparkHarness.runApp(conf, spark -> {
          spark.sparkContext().addSparkListener(tasks);
          return Jobs.skewedShuffle(spark, records, hot);
        });
      } finally {
        outage.join(TimeUnit.MINUTES.toMillis(5));
      }
      if (outageError.get() != null) {
        throw new AssertionError("the outage did not go as planned; server log " + server.logFile(), outageError.get());
      }
      server.assertAlive();
      if (mapsAtRestart.get() >= Jobs.LARGE_MAPS) {
        throw new AssertionError("test set-up: the map stage ended while the S3 server was down ("
            + mapsAtRestart.get() + " map tasks done): lower the threshold or raise the records");
      }
      // The writers went on while the tier was down (its huge partition spilled to the disk) rather
      // than waiting for it to come back.
      if (mapsAtRestart.get() <= mapsAtStop.get()) {
        throw new AssertionError("no map task finished while the S3 server was down (" + mapsAtStop.get()
            + " before, " + mapsAtRestart.get() + " at the restart): the job waited for the cold tier");
      }
      Compare.sameList("skewed job with the cold tier down part of the map stage", vanilla.value(), run.value());
      if (tasks.failed.get() != 0) {
        throw new AssertionError(tasks.failed.get() + " tasks failed during the cold-tier outage");
      }
      long failures = writeFailures(server);
      long retries = counter(server, "switchyard_cold_retries_total", "write");
      if (retries == 0) {
        throw new AssertionError("no cold write was retried while the S3 server was down");
      }
      long coldRead = ColdTierSkewedShuffleTest.metric(server, "switchyard_cold_read_bytes_total");
      if (coldRead < coldBeforeOutage.get()) {
        throw new AssertionError("the readers got " + coldRead + " bytes back from the cold tier, less than the "
            + coldBeforeOutage.get() + " it held before the outage");
      }
      String line = String.format(
          "cold outage    %6d ms, shuffle w %s; S3 down from map task %d to %d; %s cold before, %d retried and %d "
              + "failed cold writes, %s read back from cold; failed tasks 0",
          run.jobMillis(), SparkHarness.mb(run.shuffleBytesWritten()), mapsAtStop.get(), mapsAtRestart.get(),
          SparkHarness.mb(coldBeforeOutage.get()), retries, failures, SparkHarness.mb(coldRead));
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
    }
  }

  static SwitchyardProcess.Tiers tiers(SwitchyardProcess server) {
    try {
      return server.tiers();
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  static boolean coldHealthy(SwitchyardProcess server) {
    try {
      Matcher m = Pattern.compile("\"cold\":\\{[^}]*\"healthy\":(true|false)").matcher(server.adminGet("/api/v1/status"));
      if (!m.find()) {
        throw new AssertionError("no cold tier in the status");
      }
      return m.group(1).equals("true");
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }

  static long writeFailures(SwitchyardProcess server) {
    try {
      return counter(server, "switchyard_cold_failures_total", "write");
    } catch (Exception e) {
      throw new RuntimeException(e);
    }
  }
}
