package dev.switchyard.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Scenario 4: the Flink driver ({@link FlinkDriver}: MAP partitions, credit-based reads) in this
 * JVM while two Spark applications use the same switchyard process, each in its own child JVM
 * exactly as {@link MixedProtocolTest} runs them ({@link MixedJobMain}): one with the stock
 * Uniffle client, one with the stock Celeborn client (REDUCE partitions). The Flink driver starts
 * when both SparkSessions are up (the children's barrier) and runs write-then-read rounds, each on
 * a new shuffle, every byte checked, until both Spark jobs have ended (at least one round). The
 * Spark results are compared with a vanilla run, and the Flink rounds must overlap both jobs.
 *
 * <p>{@code switchyard.flink.mixed.records} (default 1M, about 110 MB shuffled per job) sizes the
 * Spark jobs.
 */
@Tag("celeborn-flink")
@Timeout(value = 6, unit = TimeUnit.MINUTES)
class CelebornFlinkMixedTest {

  static final long CHILD_TIMEOUT_MINUTES = 4;
  static final int MAX_ROUNDS = 30;

  @Test
  void flinkDriverWhileSparkJobsOfBothProtocolsRun() throws Exception {
    long records = Long.getLong("switchyard.flink.mixed.records", 1_000_000L);
    String uniffleType = SparkHarness.clientType();
    String writer = SparkHarness.celebornWriters().get(0);
    System.out.printf("[suite] CelebornFlinkMixedTest: flink driver + uniffle %s %s + celeborn %s %s, %d records per"
        + " Spark job%n", uniffleType, SparkHarness.clientLabel(), writer, SparkHarness.celebornLabel(), records);

    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla = SparkHarness.runApp(
        SparkHarness.baseConf("vanilla-flink-mixed", "local[2]"), spark -> Jobs.largeShuffle(spark, records));

    SwitchyardProcess server = SwitchyardProcess.startWithCeleborn("flink-mixed", "256MiB");
    List<MixedProtocolTest.Child> children = new ArrayList<>();
    try (FlinkDriver driver = new FlinkDriver(server.celebornMasterEndpoint())) {
      FlinkDriverClient tm = driver.newTaskManager();
      String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
      Path dir = Paths.get("target", "flink-mixed", stamp).toAbsolutePath();
      Path barrier = dir.resolve("barrier");
      Files.createDirectories(barrier);
      String uClient = "uniffle-" + uniffleType;
      String cClient = "celeborn-" + writer;
      children.add(MixedProtocolTest.launch("a-" + uClient, uClient, server.coordinatorQuorum(), records, dir, barrier));
      children.add(MixedProtocolTest.launch("b-" + cClient, cClient, server.celebornMasterEndpoint(), records, dir,
          barrier));

      // start with the two Spark jobs (they start once both of their ready files exist)
      long waitUntil = System.nanoTime() + TimeUnit.MINUTES.toNanos(3);
      while (countReady(barrier) < 2) {
        for (MixedProtocolTest.Child c : children) {
          if (!c.process().isAlive()) {
            throw new AssertionError(c.client() + " exited before its SparkSession was up\n"
                + MixedProtocolTest.tail(c.log(), 60));
          }
        }
        if (System.nanoTime() > waitUntil) {
          throw new AssertionError("the Spark children were not ready within 3 minutes");
        }
        Thread.sleep(50);
      }

      long fStart = System.currentTimeMillis();
      int rounds = 0;
      long flinkBytes = 0;
      while (rounds < MAX_ROUNDS && (rounds == 0 || children.stream().anyMatch(c -> c.process().isAlive()))) {
        FlinkDriver.Dataset d = driver.newDataset(6, 8, 2, 32 * 1024, 777L + rounds);
        List<String> failures = driver.writeAll(tm, d, 2);
        if (!failures.isEmpty()) {
          throw new AssertionError("flink round " + rounds + ": map tasks failed:\n  " + String.join("\n  ", failures)
              + "\n" + server.logTail(40));
        }
        try {
          // every sub-partition of every partition, one reader per sub-partition (the ranges
          // are CelebornFlinkDriverTest's business)
          List<FlinkDriver.ReadSpec> specs = new ArrayList<>();
          for (int s = 0; s < d.numSubs; s++) {
            specs.add(s % 2 == 0
                ? new FlinkDriver.ReadSpec("sub" + s, s, s, FlinkStreamReader.CreditMode.POOL, 0, 2, 1)
                : new FlinkDriver.ReadSpec("sub" + s, s, s, FlinkStreamReader.CreditMode.PER_CONSUMED, 2, 0, 1));
          }
          driver.readAll(tm, d, specs, 30);
        } catch (AssertionError e) {
          throw new AssertionError("flink round " + rounds + ": " + e.getMessage() + "\n" + server.logTail(40), e);
        }
        flinkBytes += d.pushedBytes();
        driver.unregister(d);
        rounds++;
      }
      long fEnd = System.currentTimeMillis();

      List<MixedProtocolTest.Outcome> outcomes = new ArrayList<>();
      List<String> failures = new ArrayList<>();
      long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(CHILD_TIMEOUT_MINUTES);
      for (MixedProtocolTest.Child c : children) {
        boolean done = c.process().waitFor(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        if (!done) {
          failures.add(c.client() + ": no result within " + CHILD_TIMEOUT_MINUTES + " minutes\n"
              + MixedProtocolTest.tail(c.log(), 60));
        } else if (c.process().exitValue() != 0 || !Files.exists(c.out())) {
          failures.add(c.client() + ": exit status " + c.process().exitValue() + "\n"
              + MixedProtocolTest.tail(c.log(), 80));
        } else {
          outcomes.add(MixedProtocolTest.parse(c.out()));
        }
      }
      if (!failures.isEmpty()) {
        throw new AssertionError(String.join("\n\n", failures) + "\n\n" + server.logTail(60));
      }
      server.assertAlive();
      MixedProtocolTest.Outcome u = outcomes.get(0);
      MixedProtocolTest.Outcome c = outcomes.get(1);
      String line = String.format(
          "flink-mixed    flink %d rounds %s [%d..%d] | %s %d ms [%d..%d] | %s %d ms [%d..%d]", rounds,
          SparkHarness.mb(flinkBytes), fStart % 1_000_000, fEnd % 1_000_000, uClient, u.end() - u.start(),
          u.start() % 1_000_000, u.end() % 1_000_000, cClient, c.end() - c.start(), c.start() % 1_000_000,
          c.end() % 1_000_000);
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      Compare.sameList("flink-mixed: " + uClient + " per-partition (count, hashSum)", vanilla.value(), u.parts());
      Compare.sameList("flink-mixed: " + cClient + " per-partition (count, hashSum)", vanilla.value(), c.parts());
      for (MixedProtocolTest.Outcome o : outcomes) {
        if (!(fStart < o.end() && o.start() < fEnd)) {
          throw new AssertionError(String.format("the Flink rounds [%d, %d] did not overlap a Spark job [%d, %d]",
              fStart, fEnd, o.start(), o.end()));
        }
      }
    } finally {
      for (MixedProtocolTest.Child c : children) {
        c.process().destroyForcibly();
      }
      server.close();
    }
  }

  private static long countReady(Path dir) throws java.io.IOException {
    try (var s = Files.list(dir)) {
      return s.filter(p -> p.getFileName().toString().endsWith(".ready")).count();
    }
  }
}
