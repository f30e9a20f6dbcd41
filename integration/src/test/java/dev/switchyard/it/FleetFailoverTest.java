package dev.switchyard.it;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * What happens to running jobs when a fleet's coordinators die, a node is cut off from the
 * network, or a node is decommissioned, with the stock clients (Celeborn 0.5.x, Uniffle 0.9.x)
 * against three {@link SwitchyardCluster} nodes. Every result equals the same job on Spark's own
 * shuffle. The helpers ({@link FleetJobsTest#written}, {@link FleetJobsTest#waitForWorkers}) and
 * the tag are {@link FleetJobsTest}'s.
 */
@Tag("fleet")
@Timeout(value = 15, unit = TimeUnit.MINUTES)
class FleetFailoverTest {

  static final String TOKEN = "integration-admin";

  /** A {@code [cluster]} table for three nodes with the given coordinators and this node's roles. */
  static String clusterToml(String coordinators, String roles) {
    return "[cluster]\n"
        + "coordinators = [" + coordinators + "]\n"
        + "roles = [" + roles + "]\n"
        + "secret = \"integration-fleet\"\n"
        + "heartbeat_interval = \"1s\"\n"
        + "worker_timeout = \"10s\"\n"
        + "warmup = \"2s\"\n"
        + "decommission_check_interval = \"1s\"\n"
        + "[admin]\n"
        + "token = \"" + TOKEN + "\"\n";
  }

  static final String ALL_THREE = "\"127.0.0.2:19980\", \"127.0.0.3:19980\", \"127.0.0.4:19980\"";
  static final String BOTH_ROLES = "\"coordinator\", \"worker\"";

  static List<Jobs.PartitionDigest> vanilla(String name, long records) {
    return SparkHarness.runApp(SparkHarness.baseConf("vanilla-" + name, "local[2]"), spark -> Jobs.largeShuffle(spark, records))
        .value();
  }

  static String masters(SwitchyardCluster c, int... nodes) {
    List<String> out = new ArrayList<>();
    for (int i : nodes) {
      out.add(c.celebornMasterEndpoint(i));
    }
    return String.join(",", out);
  }

  /** Workers in {@code state} on coordinator {@code i}'s {@code /api/v1/cluster}. */
  static int workersIn(SwitchyardCluster c, int i, String state) throws Exception {
    return c.adminGet(i, "/api/v1/cluster").split("\"state\":\"" + state + "\"", -1).length - 1;
  }

  static void waitUntil(String what, Duration timeout, BooleanSupplier check) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!check.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("not within " + timeout.toSeconds() + " s: " + what);
      }
      Thread.sleep(250);
    }
  }

  static boolean quietly(java.util.concurrent.Callable<Boolean> check) {
    try {
      return check.call();
    } catch (Exception e) {
      return false;
    }
  }

  private static final Pattern STORED_APP = Pattern.compile("\"id\":\"(celeborn|uniffle)/");

  /** Applications node {@code i} still holds data of (its status' storage.applications). */
  static int heldApps(SwitchyardCluster c, int i) {
    Matcher m = STORED_APP.matcher(c.status(i));
    int n = 0;
    while (m.find()) {
      n++;
    }
    return n;
  }

  static void record(String line) {
    System.out.println("[timing] " + line);
    SparkHarness.appendTiming(line);
  }

  /** Celeborn client settings that move a reader off a dead or silent worker within seconds. */
  static SparkConf failFast(SparkConf conf) {
    return conf.set("spark.celeborn.data.io.maxRetries", "1")
        .set("spark.celeborn.data.io.retryWait", "1s")
        .set("spark.celeborn.network.connect.timeout", "5s")
        .set("spark.celeborn.client.fetch.timeout", "5s")
        .set("spark.celeborn.client.fetch.excludeWorkerOnFailure.enabled", "true");
  }

  /**
   * Test 2 of the cluster issue. Nodes 1 and 2 are the coordinators, node 3 only a worker; every
   * client lists node 1 first. Node 1 is killed (-9) before any job: a Uniffle job and a
   * Celeborn job listing both coordinators run on node 2's. Node 1 is restarted (it warms up and
   * never saw the Celeborn application), then node 2, the coordinator the Celeborn driver talks
   * to, is killed during the map stage of the application's second job: the driver moves to node
   * 1, the pushes revive onto the live workers (replication on), and a third job that reads the
   * first job's shuffle again, from node 3's copies, equals vanilla: no worker deleted a live
   * shuffle because node 1 had not seen it.
   */
  @Test
  void jobsSurviveTheirCoordinatorsDying() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L);
    String writer = SparkHarness.celebornWriters().get(0);
    List<Jobs.PartitionDigest> vanilla = vanilla("fleet-coordinators", records);
    String coordinators = "\"127.0.0.2:19980\", \"127.0.0.3:19980\"";
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-coordinators", 3, "256MiB",
        i -> clusterToml(coordinators, i == 3 ? "\"worker\"" : BOTH_ROLES))) {
      waitUntil("both coordinators list 3 active workers", Duration.ofSeconds(30), () -> quietly(() ->
          workersIn(cluster, 1, "active") == 3 && workersIn(cluster, 2, "active") == 3));
      cluster.kill(1);
      // Until the worker timeout, node 2 still places on node 1's worker (as a JVM coordinator
      // does until its heartbeat timeout); the test is about the coordinator, so it waits.
      waitUntil("node 2 lists node 1 as lost and has ended its warm-up", Duration.ofSeconds(30), () -> quietly(() ->
          workersIn(cluster, 2, "lost") == 1 && cluster.adminGet(2, "/api/v1/cluster").contains("\"warming\":false")));

      String quorum = cluster.coordinatorQuorum(1) + "," + cluster.coordinatorQuorum(2);
      SparkHarness.Timed<List<Jobs.PartitionDigest>> uniffle = SparkHarness.runApp(
          SparkHarness.withUniffle(SparkHarness.baseConf("fleet-coordinators-uniffle", "local[2]"), quorum,
              SparkHarness.clientType()),
          spark -> Jobs.largeShuffle(spark, records));
      Compare.sameList("fleet: uniffle, first-listed coordinator dead", vanilla, uniffle.value());
      record(String.format("fleet uniffle first coordinator killed before the job %6d ms", uniffle.jobMillis()));

      FleetJobsTest.MapStageTrigger trigger = new FleetJobsTest.MapStageTrigger(Jobs.LARGE_MAPS / 3, () -> {
        System.out.println("[suite] fleet: killing node 2, the coordinator in use, during the map stage");
        cluster.kill(2);
      });
      List<List<Jobs.PartitionDigest>> middle = new ArrayList<>();
      long[] phase = new long[3];
      SparkConf conf = failFast(SparkHarness.withCeleborn(
              SparkHarness.baseConf("fleet-coordinators-celeborn", "local[2]"), masters(cluster, 1, 2), writer))
          .set("spark.celeborn.client.push.replicate.enabled", "true");
      SparkHarness.Timed<List<Jobs.PartitionDigest>> celeborn = SparkHarness.runApp(conf, spark ->
          Jobs.reusedShuffle(spark, records, () -> {
            try {
              phase[0] = System.nanoTime();
              cluster.restart(1);
              waitUntil("restarted node 1 ends its warm-up with 3 workers", Duration.ofSeconds(30), () -> quietly(() ->
                  workersIn(cluster, 1, "active") == 3 && cluster.adminGet(1, "/api/v1/cluster").contains("\"warming\":false")));
              phase[1] = System.nanoTime();
              spark.sparkContext().addSparkListener(trigger);
              middle.add(Jobs.largeShuffle(spark, records));
              phase[2] = System.nanoTime();
              trigger.thread.join();
            } catch (Exception e) {
              throw new RuntimeException(e);
            }
          }));
      if (!trigger.fired.get()) {
        throw new AssertionError("the second job's map stage ended before node 2 was killed");
      }
      Compare.sameList("fleet: celeborn, coordinator in use killed during the map stage", vanilla, middle.get(0));
      Compare.sameList("fleet: celeborn, first shuffle read again after both coordinators changed", vanilla, celeborn.value());
      record(String.format(
          "fleet celeborn coordinators: first-listed dead, then the one in use killed mid-map: job with the kill %d ms,"
              + " failed tasks %d; the first shuffle read again after it equals vanilla",
          (phase[2] - phase[1]) / 1_000_000, trigger.failedTasks.get()));
      if (!cluster.isAlive(1) || !cluster.isAlive(3)) {
        throw new AssertionError("a surviving node died\n" + cluster.logTail(1, 30) + "\n" + cluster.logTail(3, 30));
      }
    }
  }

  /**
   * Test 5 of the cluster issue. Node 3 is cut off (iptables drops its address's traffic) between
   * the two jobs of a replicated Celeborn application, without being stopped. The coordinators
   * list it as lost within the worker timeout, the second job reads node 3's partitions from
   * their replicas, and a Uniffle job run during the cut places nothing on it. The Celeborn
   * application ends while node 3 cannot hear of it; once node 3 is reachable again it rejoins as
   * active and, told by the coordinators that the application is gone, drops its data instead of
   * serving it.
   */
  @Test
  void aNodeCutOffIsTreatedAsLostAndRejoinsWithoutStaleState() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L);
    String writer = SparkHarness.celebornWriters().get(0);
    List<Jobs.PartitionDigest> vanilla = vanilla("fleet-partition", records);
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-partition", 3, "256MiB",
        i -> clusterToml(ALL_THREE, BOTH_ROLES))) {
      FleetJobsTest.waitForWorkers(cluster, 3);
      long[] cut = new long[2];
      long[] node3Before = new long[1];
      SparkConf conf = failFast(SparkHarness.withCeleborn(
              SparkHarness.baseConf("fleet-partition", "local[2]"), masters(cluster, 1, 2, 3), writer))
          .set("spark.celeborn.client.push.replicate.enabled", "true");
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark ->
          Jobs.reusedShuffle(spark, records, () -> {
            try {
              node3Before[0] = FleetJobsTest.written(cluster, 3, "celeborn");
              if (node3Before[0] <= 0) {
                throw new AssertionError("node 3 stored nothing of the first job");
              }
              cluster.isolate(3);
              cut[0] = System.nanoTime();
              waitUntil("nodes 1 and 2 list node 3 as lost", Duration.ofSeconds(30), () -> quietly(() ->
                  workersIn(cluster, 1, "lost") == 1 && workersIn(cluster, 2, "lost") == 1
                      && workersIn(cluster, 1, "active") == 2));
              cut[1] = System.nanoTime();
            } catch (Exception e) {
              throw new RuntimeException(e);
            }
          }));
      Compare.sameList("fleet: replicated celeborn, node 3 cut off before the second read", vanilla, run.value());
      record(String.format("fleet celeborn node cut off: lost after %d ms, second read from replicas, app %d ms",
          (cut[1] - cut[0]) / 1_000_000, run.jobMillis()));

      // Uniffle during the cut, through the two reachable coordinators: node 3 is not assigned.
      SparkHarness.Timed<List<Jobs.PartitionDigest>> uniffle = SparkHarness.runApp(
          SparkHarness.withUniffle(SparkHarness.baseConf("fleet-partition-uniffle", "local[2]"),
              cluster.coordinatorQuorum(1) + "," + cluster.coordinatorQuorum(2), SparkHarness.clientType()),
          spark -> Jobs.largeShuffle(spark, records));
      Compare.sameList("fleet: uniffle while node 3 is cut off", vanilla, uniffle.value());
      for (int i = 1; i <= 2; i++) {
        if (FleetJobsTest.written(cluster, i, "uniffle") <= 0) {
          throw new AssertionError("node " + i + " stored nothing of the uniffle job");
        }
      }

      long back = System.nanoTime();
      cluster.rejoin(3);
      waitUntil("every coordinator lists 3 active workers again", Duration.ofSeconds(30), () -> quietly(() ->
          workersIn(cluster, 1, "active") == 3 && workersIn(cluster, 2, "active") == 3
              && workersIn(cluster, 3, "active") == 3));
      long rejoined = System.nanoTime();
      if (FleetJobsTest.written(cluster, 3, "uniffle") != 0) {
        throw new AssertionError("node 3 was given Uniffle partitions while it was cut off");
      }
      if (FleetJobsTest.written(cluster, 3, "celeborn") != node3Before[0]) {
        throw new AssertionError("node 3 took Celeborn data while it was cut off");
      }
      waitUntil("node 3 drops the data of the application that ended while it was cut off", Duration.ofSeconds(30),
          () -> heldApps(cluster, 3) == 0);
      record(String.format("fleet node rejoined: active after %d ms, the ended application's data dropped after %d ms",
          (rejoined - back) / 1_000_000, (System.nanoTime() - back) / 1_000_000));
    }
  }

  /**
   * Test 6 of the cluster issue. Node 3 is decommissioned (admin POST with the token) during the
   * map stage of a Celeborn job: the job completes (node 3 still takes pushes for the slots it
   * holds and serves its partitions), the application's next job places nothing on it, and once
   * the application has ended (its driver's ApplicationLost) node 3 releases the data and exits 0.
   */
  @Test
  void aNodeDecommissionedDuringAJobLetsItFinishAndExits() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L);
    String writer = SparkHarness.celebornWriters().get(0);
    List<Jobs.PartitionDigest> vanilla = vanilla("fleet-decommission", records);
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-decommission", 3, "256MiB",
        i -> clusterToml(ALL_THREE, BOTH_ROLES))) {
      FleetJobsTest.waitForWorkers(cluster, 3);
      if (cluster.adminPost(3, "/api/v1/decommission", null) != 401
          || cluster.adminPost(3, "/api/v1/decommission", "wrong") != 401) {
        throw new AssertionError("decommission without the right token was not refused");
      }
      long[] node3 = new long[2];
      FleetJobsTest.MapStageTrigger trigger = new FleetJobsTest.MapStageTrigger(Jobs.LARGE_MAPS / 3, () -> {
        try {
          int code = cluster.adminPost(3, "/api/v1/decommission", TOKEN);
          System.out.println("[suite] fleet: decommissioning node 3 during the map stage: HTTP " + code);
          if (code != 202) {
            throw new AssertionError("decommission answered " + code);
          }
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
      });
      List<List<Jobs.PartitionDigest>> results = new ArrayList<>();
      SparkConf conf = SparkHarness.withCeleborn(
          SparkHarness.baseConf("fleet-decommission", "local[2]"), masters(cluster, 1, 2, 3), writer);
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark -> {
        spark.sparkContext().addSparkListener(trigger);
        results.add(Jobs.largeShuffle(spark, records));
        try {
          trigger.thread.join();
          waitUntil("every coordinator lists node 3 as decommissioning", Duration.ofSeconds(20), () -> quietly(() ->
              workersIn(cluster, 1, "decommissioning") == 1 && workersIn(cluster, 2, "decommissioning") == 1));
          node3[0] = FleetJobsTest.written(cluster, 3, "celeborn");
          List<Jobs.PartitionDigest> next = Jobs.largeShuffle(spark, records);
          node3[1] = FleetJobsTest.written(cluster, 3, "celeborn");
          return next;
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
      });
      long ended = System.nanoTime();
      Compare.sameList("fleet: celeborn job with node 3 decommissioned mid-map", vanilla, results.get(0));
      Compare.sameList("fleet: celeborn job started after node 3 was decommissioned", vanilla, run.value());
      if (node3[0] <= 0) {
        throw new AssertionError("node 3 stored nothing of the job it was decommissioned in");
      }
      if (node3[1] != node3[0]) {
        throw new AssertionError("node 3 took " + (node3[1] - node3[0]) + " bytes of a job started after its decommission");
      }
      int status = cluster.waitExit(3, Duration.ofSeconds(60));
      if (status != 0) {
        throw new AssertionError("decommissioned node 3: exit status " + status + " (-1: still running)\n" + cluster.logTail(3, 40));
      }
      record(String.format("fleet decommission mid-map: both jobs equal vanilla (%d ms), node 3 exited 0 %d ms after the app ended",
          run.jobMillis(), (System.nanoTime() - ended) / 1_000_000));
    }
  }
}
