package dev.switchyard.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * About 550 MB through the shuffle (5M records of 100 random bytes, hash-partitioned into 50
 * partitions) with switchyard's memory budget at 128 MiB, so most of it must go to disk and the
 * readers must combine memory and local files. Compared with Spark's own shuffle per partition
 * (count and sum of record hashes). {@code -Dswitchyard.large.records=N} changes the size.
 */
@Timeout(value = 10, unit = java.util.concurrent.TimeUnit.MINUTES)
@Tag("uniffle")
class SpillingLargeShuffleTest {

  static SwitchyardProcess server;

  @BeforeAll
  static void startServer() throws Exception {
    if (!SparkHarness.vanillaOnly()) {
      server = SwitchyardProcess.start("large", "128MiB");
    }
  }

  @AfterAll
  static void stopServer() {
    if (server != null) {
      server.close();
      server = null;
    }
  }

  @Test
  void largeShuffleSpillsToDisk() throws Exception {
    long records = Jobs.largeRecords();
    System.out.printf(
        "[suite] SpillingLargeShuffleTest: %d records, ~%d MB shuffled%n",
        records, records * (Jobs.LARGE_PAYLOAD + 10) / 1_000_000);
    DiskSampler disk = server == null ? null : new DiskSampler(server.dataDir());
    try {
      SparkHarness.compareWithVanilla(
          "largeShuffle",
          server,
          spark -> Jobs.largeShuffle(spark, records),
          (e, a) -> Compare.sameList("largeShuffle per-partition (count, hashSum)", e, a));
    } finally {
      if (disk != null) {
        disk.stop();
      }
    }
    if (disk != null) {
      long peak = disk.peakBytes();
      System.out.printf("[suite] peak size of switchyard's data dir during the job: %d MB%n", peak / 1_000_000);
      SparkHarness.appendTiming(String.format("largeShuffle   peak switchyard data dir %d MB", peak / 1_000_000));
      if (records >= 2_000_000 && peak == 0) {
        throw new AssertionError(
            "the shuffle was far larger than the 128 MiB memory budget, yet nothing appeared under "
                + server.dataDir());
      }
    }
  }

  /** Samples the total size of a directory tree every 250 ms and keeps the peak. */
  static final class DiskSampler {
    private final AtomicLong peak = new AtomicLong();
    private final AtomicBoolean running = new AtomicBoolean(true);
    private final Thread thread;

    DiskSampler(Path dir) {
      thread = new Thread(() -> {
        while (running.get()) {
          peak.accumulateAndGet(sizeOf(dir), Math::max);
          try {
            Thread.sleep(250);
          } catch (InterruptedException e) {
            return;
          }
        }
      }, "disk-sampler");
      thread.setDaemon(true);
      thread.start();
    }

    void stop() throws InterruptedException {
      running.set(false);
      thread.interrupt();
      thread.join(5000);
    }

    long peakBytes() {
      return peak.get();
    }

    static long sizeOf(Path dir) {
      try (Stream<Path> s = Files.walk(dir)) {
        return s.mapToLong(p -> {
          try {
            return Files.isRegularFile(p) ? Files.size(p) : 0;
          } catch (IOException e) {
            return 0; // deleted while walking
          }
        }).sum();
      } catch (IOException | UncheckedIOException e) {
        return 0;
      }
    }
  }
}
