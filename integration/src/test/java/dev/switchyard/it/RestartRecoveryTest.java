package dev.switchyard.it;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Restarts keep committed data (the restart issue). One Switchyard node with every role, on its
 * default ports (the cluster fixture with one node); a Spark application computes a shuffle and
 * reuses it in a second job, which reads it again without rerunning the map stage. Between the
 * two jobs the node is restarted: once with SIGTERM and once with kill -9, for the stock
 * Celeborn client and the stock Uniffle client. The second job reads what the restarted node
 * recovered and equals Spark's own shuffle.
 *
 * <p>Tag {@code fleet}: it runs in the fleet entry of run-celeborn-matrix.sh, which sets up both
 * clients.
 */
@Tag("fleet")
@Timeout(value = 15, unit = TimeUnit.MINUTES)
class RestartRecoveryTest {

  static long records;
  static List<Jobs.PartitionDigest> vanilla;

  @BeforeAll
  static void vanillaRun() {
    records = Long.getLong("switchyard.restart.records", 600_000L);
    vanilla = SparkHarness.runApp(SparkHarness.baseConf("vanilla-restart", "local[2]"),
            spark -> Jobs.reusedShuffle(spark, records, () -> {}))
        .value();
  }

  /** The status's recovery figures of node 1. */
  static long recovered(SwitchyardCluster c, String field) throws Exception {
    String body = c.adminGet(1, "/api/v1/status");
    Matcher m = Pattern.compile("\"recovery\":\\{[^}]*\"" + field + "\":(\\d+)").matcher(body);
    if (!m.find()) {
      throw new AssertionError("no recovery." + field + " in the status: " + body);
    }
    return Long.parseLong(m.group(1));
  }

  /** Runs the reused-shuffle application with the node restarted between its jobs. */
  static void restartBetweenJobs(String name, boolean kill, java.util.function.Function<SwitchyardCluster, SparkConf> conf)
      throws Exception {
    try (SwitchyardCluster cluster = SwitchyardCluster.start(name, 1, "256MiB", i -> "")) {
      long[] restart = new long[3];
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf.apply(cluster), spark ->
          Jobs.reusedShuffle(spark, records, () -> {
            try {
              String before = cluster.nodeId(1);
              restart[0] = System.nanoTime();
              int status = kill ? cluster.kill(1) : cluster.stop(1);
              if (!kill && status != 0) {
                throw new AssertionError("SIGTERM: exit status " + status);
              }
              cluster.restart(1);
              restart[1] = System.nanoTime();
              if (!before.equals(cluster.nodeId(1))) {
                throw new AssertionError("the node came back as " + cluster.nodeId(1) + ", not " + before);
              }
              restart[2] = recovered(cluster, "partitions");
              if (restart[2] == 0) {
                throw new AssertionError("nothing recovered: " + cluster.adminGet(1, "/api/v1/status"));
              }
            } catch (Exception e) {
              throw new RuntimeException(e);
            }
          }));
      Compare.sameList(name + ": second job after the restart", vanilla, run.value());
      // The second job read what the node recovered: had a read failed, Spark would have rerun
      // the map stage (a fetch failure) and pushed the shuffle again, to a node that counts it.
      Matcher appended = Pattern.compile("\"appended_bytes\":(\\d+)").matcher(cluster.adminGet(1, "/api/v1/status"));
      if (!appended.find() || Long.parseLong(appended.group(1)) != 0) {
        throw new AssertionError(name + ": the restarted node took new pushes (the map stage ran again): "
            + cluster.adminGet(1, "/api/v1/status"));
      }
      FleetFailoverTest.record(String.format(
          "%s: node %s, back in %d ms with %d committed partitions recovered; application %d ms",
          name, kill ? "killed -9" : "stopped (SIGTERM)", (restart[1] - restart[0]) / 1_000_000, restart[2],
          run.jobMillis()));
    }
  }

  static SparkConf celeborn(String name, SwitchyardCluster c) {
    return FleetFailoverTest.failFast(SparkHarness.withCeleborn(SparkHarness.baseConf(name, "local[2]"),
        c.celebornMasterEndpoint(1), SparkHarness.celebornWriters().get(0)));
  }

  static SparkConf uniffle(String name, SwitchyardCluster c) {
    return SparkHarness.withUniffle(SparkHarness.baseConf(name, "local[2]"), c.coordinatorQuorum(1),
        SparkHarness.clientType());
  }

  @Test
  void celebornReadsItsCommittedShuffleAfterSigterm() throws Exception {
    restartBetweenJobs("restart-celeborn-term", false, c -> celeborn("restart-celeborn-term", c));
  }

  @Test
  void celebornReadsItsCommittedShuffleAfterKill9() throws Exception {
    restartBetweenJobs("restart-celeborn-kill", true, c -> celeborn("restart-celeborn-kill", c));
  }

  @Test
  void uniffleReadsItsReportedShuffleAfterSigterm() throws Exception {
    restartBetweenJobs("restart-uniffle-term", false, c -> uniffle("restart-uniffle-term", c));
  }

  @Test
  void uniffleReadsItsReportedShuffleAfterKill9() throws Exception {
    restartBetweenJobs("restart-uniffle-kill", true, c -> uniffle("restart-uniffle-kill", c));
  }
}
