package dev.switchyard.it;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A rolling restart of a three-node fleet (every node a coordinator and a worker), as
 * docs/recovery.md tells operators to do it: SIGTERM one node, start it again on the same data
 * dir and ports, wait until every coordinator lists three active workers and none is warming
 * up, then the next node.
 *
 * <ul>
 *   <li>Between the two jobs of an application that reuses its shuffle, for the stock Uniffle
 *       and Celeborn clients: the second job reads the whole shuffle from the restarted nodes,
 *       equals Spark's own shuffle, and no node took a push after its restart (no map task ran
 *       again).
 *   <li>During a Celeborn job with replication on: the restarts run while the job's map stage
 *       pushes (and go on into its reduce stage); the client revives onto the live workers and
 *       reads from replicas, and the result equals Spark's own shuffle.
 * </ul>
 *
 * <p>Tag {@code fleet}: the fleet entry of run-celeborn-matrix.sh runs it.
 */
@Tag("fleet")
@Timeout(value = 15, unit = TimeUnit.MINUTES)
class RollingRestartTest {

  static long records;
  static List<Jobs.PartitionDigest> vanilla;

  @BeforeAll
  static void vanillaRun() {
    records = Long.getLong("switchyard.restart.records", 600_000L);
    vanilla = SparkHarness.runApp(SparkHarness.baseConf("vanilla-rolling", "local[2]"),
            spark -> Jobs.reusedShuffle(spark, records, () -> {}))
        .value();
  }

  static SwitchyardCluster fleet(String name) throws Exception {
    SwitchyardCluster cluster = SwitchyardCluster.start(name, 3, "256MiB",
        i -> FleetFailoverTest.clusterToml(FleetFailoverTest.ALL_THREE, FleetFailoverTest.BOTH_ROLES));
    FleetJobsTest.waitForWorkers(cluster, 3);
    return cluster;
  }

  /**
   * Restarts every node in turn with SIGTERM; returns each node's time from SIGTERM to ready.
   * {@code settle} is waited after a node is back before the next stops: a running Celeborn
   * driver learns that a worker it saw stopping is back only from its next heartbeat to the
   * master ({@code celeborn.client.application.heartbeatInterval}, 10 s), and places nothing on
   * it until then (docs/recovery.md says the same to operators).
   */
  static List<Long> rollingRestart(SwitchyardCluster cluster, Duration settle) throws Exception {
    List<Long> millis = new ArrayList<>();
    for (int i = 1; i <= cluster.size(); i++) {
      String id = cluster.nodeId(i);
      long t0 = System.nanoTime();
      int status = cluster.stop(i);
      if (status != 0) {
        throw new AssertionError("node " + i + " exited with " + status + " on SIGTERM\n" + cluster.logTail(i, 30));
      }
      cluster.restart(i);
      millis.add((System.nanoTime() - t0) / 1_000_000);
      if (!id.equals(cluster.nodeId(i))) {
        throw new AssertionError("node " + i + " came back as " + cluster.nodeId(i) + ", not " + id);
      }
      FleetJobsTest.waitForWorkers(cluster, 3);
      if (i < cluster.size()) {
        Thread.sleep(settle.toMillis());
      }
    }
    return millis;
  }

  static long statusField(SwitchyardCluster c, int i, String regex) throws Exception {
    String body = c.adminGet(i, "/api/v1/status");
    Matcher m = Pattern.compile(regex).matcher(body);
    if (!m.find()) {
      throw new AssertionError("no " + regex + " in node " + i + "'s status: " + body);
    }
    return Long.parseLong(m.group(1));
  }

  void betweenJobs(String name, Function<SwitchyardCluster, SparkConf> conf) throws Exception {
    try (SwitchyardCluster cluster = fleet(name)) {
      List<Long> restarts = new ArrayList<>();
      long[] recovered = new long[1];
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf.apply(cluster), spark ->
          Jobs.reusedShuffle(spark, records, () -> {
            try {
              restarts.addAll(rollingRestart(cluster, Duration.ZERO));
              for (int i = 1; i <= cluster.size(); i++) {
                recovered[0] += statusField(cluster, i, "\"recovery\":\\{[^}]*\"partitions\":(\\d+)");
              }
            } catch (Exception e) {
              throw new RuntimeException(e);
            }
          }));
      Compare.sameList(name + ": second job after a rolling restart", vanilla, run.value());
      if (recovered[0] == 0) {
        throw new AssertionError(name + ": the restarted nodes recovered nothing");
      }
      for (int i = 1; i <= cluster.size(); i++) {
        long appended = statusField(cluster, i, "\"appended_bytes\":(\\d+)");
        if (appended != 0) {
          throw new AssertionError(name + ": node " + i + " took " + appended
              + " bytes of pushes after its restart (the map stage ran again)");
        }
      }
      FleetFailoverTest.record(String.format(
          "%s: 3 nodes restarted in turn (SIGTERM to ready: %s ms), %d partitions recovered; application %d ms",
          name, restarts, recovered[0], run.jobMillis()));
    }
  }

  @Test
  void uniffleReadsItsShuffleAfterARollingRestart() throws Exception {
    betweenJobs("rolling-uniffle", c -> SparkHarness.withUniffle(
        SparkHarness.baseConf("rolling-uniffle", "local[2]"), c.coordinatorQuorum(), SparkHarness.clientType()));
  }

  @Test
  void celebornReadsItsShuffleAfterARollingRestart() throws Exception {
    betweenJobs("rolling-celeborn", c -> FleetFailoverTest.failFast(SparkHarness.withCeleborn(
        SparkHarness.baseConf("rolling-celeborn", "local[2]"), FleetFailoverTest.masters(c, 1, 2, 3),
        SparkHarness.celebornWriters().get(0))));
  }

  /**
   * The restarts run during a replicated Celeborn job of four times the records: they start once two
   * map tasks have ended and each node is restarted once, whatever stage the job is in by then.
   */
  @Test
  void aReplicatedCelebornJobSurvivesARollingRestartUnderIt() throws Exception {
    try (SwitchyardCluster cluster = fleet("rolling-under-job")) {
      List<Long> restarts = new ArrayList<>();
      Throwable[] failed = new Throwable[1];
      long underJob = 4 * records;
      FleetJobsTest.MapStageTrigger trigger = new FleetJobsTest.MapStageTrigger(2, () -> {
        try {
          restarts.addAll(rollingRestart(cluster, Duration.ofSeconds(11)));
        } catch (Throwable e) {
          failed[0] = e;
        }
      });
      // The client's own settings, but for replication: a restart is no failure to tune for.
      SparkConf conf = SparkHarness.withCeleborn(
              SparkHarness.baseConf("rolling-under-job", "local[2]"), FleetFailoverTest.masters(cluster, 1, 2, 3),
              SparkHarness.celebornWriters().get(0))
          .set("spark.celeborn.client.push.replicate.enabled", "true");
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark -> {
        spark.sparkContext().addSparkListener(trigger);
        List<Jobs.PartitionDigest> out = Jobs.largeShuffle(spark, underJob);
        try {
          if (trigger.thread != null) {
            trigger.thread.join();
          }
        } catch (InterruptedException e) {
          throw new RuntimeException(e);
        }
        return out;
      });
      if (!trigger.fired.get()) {
        throw new AssertionError("the map stage ended before the rolling restart began");
      }
      if (failed[0] != null) {
        throw new AssertionError("the rolling restart failed", failed[0]);
      }
      Compare.sameList("rolling restart under a replicated Celeborn job",
          FleetFailoverTest.vanilla("rolling-under-job", underJob), run.value());
      // Nodes stopped while the map stage pushed kept their live locations
      // (notes of the graceful stop) and resumed them.
      long resumed = 0;
      for (int i = 1; i <= cluster.size(); i++) {
        resumed += statusField(cluster, i, "\"recovery\":\\{[^}]*\"notes\":(\\d+)");
      }
      if (resumed == 0) {
        throw new AssertionError("no node was restarted while it held live locations: the restarts missed the map stage");
      }
      FleetFailoverTest.record(String.format(
          "rolling-under-job: celeborn, replication on, 3 nodes restarted in turn from the second map task on"
              + " (SIGTERM to ready: %s ms), %d live locations resumed; job %d ms, failed tasks %d; equals vanilla",
          restarts, resumed, run.jobMillis(), trigger.failedTasks.get()));
    }
  }
}
