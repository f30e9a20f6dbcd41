package dev.switchyard.it;

import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The 0.10 client's partition reassign ({@code spark.rss.client.reassign.enabled=true}, one
 * replica) against a fleet of three switchyard nodes on 127.0.0.1 ({@link LoopbackFleet}): a
 * server that refuses writes mid-job (decommissioning, or full for the application) makes the writers move its partitions to
 * other servers through the coordinator, and a huge partition past the servers' split limit is
 * spread over other servers ({@code LOAD_BALANCE}). Each job must equal Spark's own shuffle.
 *
 * <p>Tag {@code reassign} (also {@code uniffle}, so every Uniffle matrix entry runs it): a client
 * without partition split and the SparkConf it sends with registerShuffle (before 0.10) is
 * skipped by an assumption, nothing else is.
 */
@Tag("uniffle")
@Tag("reassign")
@Timeout(value = 10, unit = TimeUnit.MINUTES)
class UniffleReassignTest {

  /** Records of both jobs: {@code switchyard.reassign.records}, default 2M (about 220 MB shuffled). */
  static long records() {
    return Long.getLong("switchyard.reassign.records", 2_000_000L);
  }

  /** Per test (not per class), so that surefire counts each skip. */
  @BeforeEach
  void needsAReassigningClient() {
    boolean has;
    try {
      Class.forName("org.apache.uniffle.common.PartitionSplitMode", false, UniffleReassignTest.class.getClassLoader());
      has = true;
    } catch (ClassNotFoundException e) {
      has = false;
    }
    Assumptions.assumeTrue(has && !SparkHarness.vanillaOnly(),
        "client " + SparkHarness.clientLabel() + " has no partition split (0.10+): reassign tests skipped");
  }

  /** The Uniffle client with reassign on and one replica. */
  static SparkConf reassigning(String app, LoopbackFleet fleet) {
    return SparkHarness.withUniffle(SparkHarness.baseConf(app), fleet.quorum(), SparkHarness.clientType())
        .set("spark.rss.client.reassign.enabled", "true")
        .set("spark.rss.data.replica", "1")
        .set("spark.rss.data.replica.write", "1")
        .set("spark.rss.data.replica.read", "1");
  }

  /**
   * Node 3 is decommissioned after a fifth of the map tasks. It refuses the reassigning
   * application's requireBuffer from then on (INTERNAL_NOT_RETRY_ERROR), the writers ask the
   * driver for other servers, the driver asks the coordinator (which excludes node 3) and the
   * rest of node 3's partitions go to nodes 1 and 2. Readers read both. No task fails, the result
   * equals vanilla, and node 3 takes no block once its refusal is in place while the others go
   * on taking the job's blocks.
   */
  @Test
  void aDecommissionedServerMakesTheWritersReassignItsPartitions() throws Exception {
    long records = records();
    List<Jobs.PartitionDigest> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-reassign"), spark -> Jobs.largeShuffle(spark, records)).value();
    try (LoopbackFleet fleet = LoopbackFleet.start("reassign", 3, "256MiB", "")) {
      // at[0]: when node 3's refusal is in place; at[1]: at the end; at[2]: right when the
      // decommission was answered (the others' baseline: a refused write lands after it).
      long[][] at = new long[3][];
      double[] refused = new double[1];
      FleetJobsTest.MapStageTrigger trigger = new FleetJobsTest.MapStageTrigger(Jobs.LARGE_MAPS / 5, () -> {
        try {
          int code = fleet.decommission(3);
          if (code != 202) {
            throw new AssertionError("decommission answered " + code);
          }
          at[2] = fleet.appended();
          // Tickets granted before the flag was set may still be spent: let them land.
          Thread.sleep(1000);
          at[0] = fleet.appended();
          System.out.println("[suite] reassign: node 3 decommissioning, appended " + Arrays.toString(at[0]));
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
      });
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(reassigning("reassign-decommission", fleet), spark -> {
        spark.sparkContext().addSparkListener(trigger);
        List<Jobs.PartitionDigest> out = Jobs.largeShuffle(spark, records);
        try {
          spark.sparkContext().listenerBus().waitUntilEmpty(10_000);
          if (trigger.thread == null) {
            throw new AssertionError("the map stage ended before node 3 was decommissioned");
          }
          trigger.thread.join();
          at[1] = fleet.appended();
          refused[0] = fleet.metric(3, "switchyard_uniffle_errors_total", "status=\"INTERNAL_NOT_RETRY_ERROR\"");
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
        return out;
      });
      Compare.sameList("reassign: job with node 3 decommissioned mid-map", vanilla, run.value());
      String line = String.format(
          "reassign-decommission %6d ms, appended at the decommission %s, at the end %s, node 3 refused %.0f requireBuffer",
          run.jobMillis(), Arrays.toString(at[0]), Arrays.toString(at[1]), refused[0]);
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      if (trigger.failedTasks.get() != 0) {
        throw new AssertionError(trigger.failedTasks.get() + " tasks failed: the writers should have reassigned");
      }
      if (at[0][2] <= 0) {
        throw new AssertionError("node 3 stored nothing before its decommission: the test proves nothing");
      }
      if (refused[0] <= 0) {
        throw new AssertionError("node 3 refused no requireBuffer after its decommission");
      }
      if (at[1][2] != at[0][2]) {
        throw new AssertionError("node 3 took " + (at[1][2] - at[0][2]) + " bytes after it refused writes");
      }
      if (at[1][0] + at[1][1] <= at[2][0] + at[2][1]) {
        throw new AssertionError("nodes 1 and 2 took nothing after the decommission: the refused writes went nowhere");
      }
    }
  }

  /**
   * Node 3 is full for the job: its byte quota for one application ({@code
   * storage.apps.max_app_bytes}, 16 MiB, on node 3 only) is reached early in the map stage, and
   * from then on it refuses the application's requireBuffer ({@code ACCESS_DENIED}). The writers
   * move its partitions to the other nodes through the coordinator and resend the refused blocks
   * there. No task fails, the result equals vanilla, node 3 refused writes and holds little more
   * than its quota, and nodes 1 and 2 hold the rest.
   */
  @Test
  void aFullServerMakesTheWritersReassignItsPartitions() throws Exception {
    long records = records();
    List<Jobs.PartitionDigest> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-full"), spark -> Jobs.largeShuffle(spark, records)).value();
    long quota = 16L << 20;
    try (LoopbackFleet fleet = LoopbackFleet.start("full", 3, "256MiB", "",
        i -> i == 3 ? "[storage.apps]\nmax_app_bytes = \"16MiB\"\n" : "")) {
      long[] before = fleet.appended();
      FleetJobsTest.MapStageTrigger tasks = new FleetJobsTest.MapStageTrigger(Integer.MAX_VALUE, () -> {});
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(reassigning("reassign-full", fleet), spark -> {
        spark.sparkContext().addSparkListener(tasks);
        return Jobs.largeShuffle(spark, records);
      });
      Compare.sameList("reassign: job with node 3 full", vanilla, run.value());
      long[] after = fleet.appended();
      double refused = fleet.metric(3, "switchyard_uniffle_errors_total", "status=\"ACCESS_DENIED\"");
      String line = String.format(
          "reassign-full %6d ms, stored per node %s, node 3 refused %.0f requireBuffer",
          run.jobMillis(), Arrays.toString(new long[] {after[0] - before[0], after[1] - before[1], after[2] - before[2]}), refused);
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      if (tasks.failedTasks.get() != 0) {
        throw new AssertionError(tasks.failedTasks.get() + " tasks failed: the writers should have reassigned");
      }
      if (refused <= 0) {
        throw new AssertionError("node 3 refused no requireBuffer: it never filled up, the test proves nothing");
      }
      long node3 = after[2] - before[2];
      // Tickets granted just before the quota was reached may still land: allow a few buffers more.
      if (node3 > quota + (32L << 20)) {
        throw new AssertionError("node 3 stored " + node3 + " bytes past its " + quota + "-byte quota");
      }
      long total = (after[0] - before[0]) + (after[1] - before[1]) + node3;
      if (total < run.shuffleBytesWritten()) {
        throw new AssertionError("the nodes stored " + total + " bytes, Spark wrote " + run.shuffleBytesWritten());
      }
    }
  }

  /**
   * Every node splits a partition once it has received 80 MiB of it ({@code
   * uniffle.huge_partition_split_limit}). The skewed job sends 80% of its records (about 176 of
   * 220 MB) to one partition; the node holding it names it in a requireBuffer answer, and the
   * writers ({@code LOAD_BALANCE}, two servers) spread its later blocks over the two other nodes,
   * which stay under the limit (the 0.10.0 writer fails a task told twice about a partition it
   * spread: Uniffle #2622). The result equals vanilla, a node counted the split, and no node
   * holds 70% of the shuffle (the hot partition's node would hold over 80% without the split).
   */
  @Test
  void aHugePartitionIsSplitOverOtherServers() throws Exception {
    long records = records();
    double hot = 0.8;
    List<Jobs.PartitionDigest> vanilla = SparkHarness.runApp(
        SparkHarness.baseConf("vanilla-split"), spark -> Jobs.skewedShuffle(spark, records, hot)).value();
    try (LoopbackFleet fleet = LoopbackFleet.start("split", 3, "256MiB", "huge_partition_split_limit = \"80MiB\"\n")) {
      long[] before = fleet.appended();
      SparkConf conf = reassigning("split-load-balance", fleet)
          .set("spark.rss.client.reassign.partitionSplitMode", "LOAD_BALANCE")
          .set("spark.rss.client.reassign.partitionSplitLoadBalanceServerNumber", "2");
      FleetJobsTest.MapStageTrigger tasks = new FleetJobsTest.MapStageTrigger(Integer.MAX_VALUE, () -> {});
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark -> {
        spark.sparkContext().addSparkListener(tasks);
        return Jobs.skewedShuffle(spark, records, hot);
      });
      Compare.sameList("split: skewed job", vanilla, run.value());
      long[] after = fleet.appended();
      long total = 0;
      long most = 0;
      double splits = 0;
      for (int i = 0; i < 3; i++) {
        long stored = after[i] - before[i];
        total += stored;
        most = Math.max(most, stored);
        splits += fleet.counter(i + 1, "switchyard_uniffle_partition_splits_total");
      }
      String line = String.format(
          "split-load-balance %6d ms, stored %s of %s on one node, split answers %.0f",
          run.jobMillis(), SparkHarness.mb(most), SparkHarness.mb(total), splits);
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      if (tasks.failedTasks.get() != 0) {
        throw new AssertionError(tasks.failedTasks.get() + " tasks failed");
      }
      if (splits <= 0) {
        throw new AssertionError("no node answered a requireBuffer with a partition to split");
      }
      if (total < run.shuffleBytesWritten()) {
        throw new AssertionError("the nodes stored " + total + " bytes, Spark wrote " + run.shuffleBytesWritten());
      }
      if (most > 0.7 * total) {
        throw new AssertionError("one node stored " + most + " of " + total + " bytes: the hot partition was not split");
      }
    }
  }
}
