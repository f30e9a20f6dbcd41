package dev.switchyard.it;

import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The large job of {@link SpillingLargeShuffleTest} (5M records of 100 random bytes, about 560 MB
 * through the shuffle, 50 partitions) with the Celeborn client, once per writer, against a
 * switchyard whose memory budget is 128 MiB, so most of the data must go to disk. Compared with
 * Spark's own shuffle per partition (count and sum of record hashes). {@code
 * -Dswitchyard.large.records=N} changes the size.
 */
@Tag("celeborn")
@Timeout(value = 10, unit = java.util.concurrent.TimeUnit.MINUTES)
class CelebornLargeShuffleTest {

  static SwitchyardProcess server;

  static List<String> writers() {
    return SparkHarness.celebornWriters();
  }

  @BeforeAll
  static void startServer() throws Exception {
    if (!SparkHarness.vanillaOnly()) {
      server = SwitchyardProcess.startWithCeleborn("celeborn-large", "128MiB");
    }
  }

  @AfterAll
  static void stopServer() {
    if (server != null) {
      server.close();
      server = null;
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("writers")
  void largeShuffleSpillsToDisk(String writer) throws Exception {
    long records = Jobs.largeRecords();
    System.out.printf(
        "[suite] CelebornLargeShuffleTest %s: %d records, ~%d MB shuffled%n",
        writer, records, records * (Jobs.LARGE_PAYLOAD + 10) / 1_000_000);
    SpillingLargeShuffleTest.DiskSampler disk =
        server == null ? null : new SpillingLargeShuffleTest.DiskSampler(server.dataDir());
    try {
      SparkHarness.compareWithVanilla(
          "largeShuffle/" + writer,
          server,
          SparkHarness.celeborn(writer),
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
      SparkHarness.appendTiming(
          String.format("largeShuffle/%s peak switchyard data dir %d MB", writer, peak / 1_000_000));
      if (records >= 2_000_000 && peak == 0) {
        throw new AssertionError(
            "the shuffle was far larger than the 128 MiB memory budget, yet nothing appeared under "
                + server.dataDir());
      }
    }
  }
}
