package dev.switchyard.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Three switchyard nodes as one fleet ({@link SwitchyardCluster}, 127.0.0.2-4 with the default
 * ports, every node a coordinator and a worker, {@code [cluster]} naming all three). A Spark job
 * with the stock Uniffle client listing all three coordinators, then one with the stock Celeborn
 * client listing all three masters, each in its own child JVM ({@link MixedJobMain}): both results
 * equal the same job on Spark's own shuffle, and every node stored part of each job's shuffle
 * (its migration report shows bytes written for an application of that protocol).
 *
 * <p>Tag {@code fleet}: {@code mvn test -Dshuffle.client=fleet}; run-celeborn-matrix.sh has an
 * entry for it.
 */
@Tag("fleet")
@Timeout(value = 15, unit = TimeUnit.MINUTES)
class FleetJobsTest {

  static final String FLEET_TOML =
      "[cluster]\n"
          + "coordinators = [\"127.0.0.2:19980\", \"127.0.0.3:19980\", \"127.0.0.4:19980\"]\n"
          + "secret = \"integration-fleet\"\n"
          + "heartbeat_interval = \"1s\"\n"
          + "worker_timeout = \"10s\"\n"
          + "warmup = \"2s\"\n";

  /** Bytes node {@code i} reports written for applications of {@code protocol}. */
  static long written(SwitchyardCluster c, int i, String protocol) throws Exception {
    String body = c.adminGet(i, "/api/v1/migration");
    Matcher m = Pattern.compile(
            "\"protocol\":\"" + protocol + "\",\"id\":\"[^\"]*\",\"client\":(?:null|\"[^\"]*\"),\"written_bytes\":(\\d+)")
        .matcher(body);
    long sum = 0;
    while (m.find()) {
      sum += Long.parseLong(m.group(1));
    }
    return sum;
  }

  /** Until every coordinator lists {@code n} active workers and has ended its warm-up. */
  static void waitForWorkers(SwitchyardCluster c, int n) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (true) {
      boolean all = true;
      String body = "";
      for (int i = 1; i <= c.size(); i++) {
        body = c.adminGet(i, "/api/v1/cluster");
        int active = body.split("\"state\":\"active\"", -1).length - 1;
        all &= active == n && body.contains("\"warming\":false");
      }
      if (all) {
        return;
      }
      if (System.nanoTime() > deadline) {
        throw new AssertionError("the coordinators do not all list " + n + " active workers, warm: " + body);
      }
      Thread.sleep(200);
    }
  }

  /**
   * Runs {@code client}'s job (a {@link MixedJobMain} client name) in a child JVM against {@code
   * endpoint}; its per-partition result must equal {@code vanilla}.
   */
  static MixedProtocolTest.Outcome childJob(SwitchyardCluster cluster, List<Jobs.PartitionDigest> vanilla,
      String client, String endpoint, long records, Path dir) throws Exception {
    Path barrier = dir.resolve("barrier-" + client);
    MixedProtocolTest.Child child = MixedProtocolTest.launch(client, client, endpoint, records, dir, barrier, 1);
    if (!child.process().waitFor(8, TimeUnit.MINUTES)) {
      child.process().destroyForcibly();
      throw new AssertionError(client + ": no result within 8 minutes\n" + MixedProtocolTest.tail(child.log(), 60));
    }
    if (child.process().exitValue() != 0 || !Files.exists(child.out())) {
      throw new AssertionError(client + ": exit status " + child.process().exitValue() + "\n"
          + MixedProtocolTest.tail(child.log(), 80) + "\nnode 1:\n" + cluster.logTail(1, 40));
    }
    MixedProtocolTest.Outcome o = MixedProtocolTest.parse(child.out());
    Compare.sameList("fleet: " + client + " per-partition (count, hashSum)", vanilla, o.parts());
    return o;
  }

  /**
   * Node 1 only coordinates ({@code roles = ["coordinator"]}: no shuffle server, no worker
   * ports), node 2 coordinates and stores, node 3 only stores. A job of each stock client that
   * lists both coordinators, node 1 first, equals vanilla; its shuffle is on nodes 2 and 3 and
   * node 1 stored nothing.
   */
  @Test
  void aCoordinatorOnlyNodePlacesJobsOnTheWorkers() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L) / 2;
    // GRPC: the 0.9.x reader over GRPC_NETTY may fail on JDK 17 whatever the server
    // ("duplicate or slice", Uniffle #2082); the placement under test is the same.
    String uniffleType = "GRPC";
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla = SparkHarness.runApp(
        SparkHarness.baseConf("vanilla-coordinator-only", "local[2]"), spark -> Jobs.largeShuffle(spark, records));
    String cluster2 = "[cluster]\n"
        + "coordinators = [\"127.0.0.2:19980\", \"127.0.0.3:19980\"]\n"
        + "secret = \"integration-fleet\"\n"
        + "heartbeat_interval = \"1s\"\n"
        + "worker_timeout = \"10s\"\n"
        + "warmup = \"2s\"\n";
    java.util.function.IntFunction<String> toml = i -> cluster2
        + (i == 1 ? "roles = [\"coordinator\"]\n" : i == 2 ? "" : "roles = [\"worker\"]\n");
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-coordinator-only", 3, "256MiB", toml)) {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      for (int c = 1; c <= 2; c++) {
        String body;
        while (true) {
          body = cluster.adminGet(c, "/api/v1/cluster");
          if (body.split("\"state\":\"active\"", -1).length - 1 == 2 && body.contains("\"warming\":false")) {
            break;
          }
          if (System.nanoTime() > deadline) {
            throw new AssertionError("coordinator " + c + " does not list 2 active workers: " + body);
          }
          Thread.sleep(200);
        }
      }
      Path dir = Paths.get("target", "fleet-coordinator-only",
          LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"))).toAbsolutePath();
      Files.createDirectories(dir);
      String[][] runs = {
        {"uniffle-" + uniffleType, cluster.coordinatorQuorum(1) + "," + cluster.coordinatorQuorum(2), "uniffle"},
        {"celeborn-" + writer, cluster.celebornMasterEndpoint(1) + "," + cluster.celebornMasterEndpoint(2), "celeborn"},
      };
      for (String[] run : runs) {
        MixedProtocolTest.Outcome o = childJob(cluster, vanilla.value(), run[0], run[1], records, dir);
        long[] w = {written(cluster, 1, run[2]), written(cluster, 2, run[2]), written(cluster, 3, run[2])};
        String line = String.format("fleet, coordinator-only node 1: %-16s %6d ms; stored on nodes 1-3: %s %s %s",
            run[0], o.end() - o.start(), SparkHarness.mb(w[0]), SparkHarness.mb(w[1]), SparkHarness.mb(w[2]));
        System.out.println("[timing] " + line);
        SparkHarness.appendTiming(line);
        if (w[0] != 0 || w[1] <= 0 || w[2] <= 0) {
          throw new AssertionError(run[0] + ": expected nothing on node 1 and data on nodes 2 and 3: " + line);
        }
      }
    }
  }

  @Test
  void sparkJobsOfBothClientsSpreadOverThreeNodes() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L);
    String uniffleType = SparkHarness.clientType();
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-fleet", "local[2]"), spark -> Jobs.largeShuffle(spark, records));
    System.out.printf("[suite] FleetJobsTest: %d records, vanilla %d ms%n", records, vanilla.jobMillis());

    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet", 3, "256MiB", FLEET_TOML)) {
      waitForWorkers(cluster, 3);
      String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
      Path dir = Paths.get("target", "fleet", stamp).toAbsolutePath();
      Files.createDirectories(dir);
      String quorum = cluster.coordinatorQuorum();
      String masters = String.join(",",
          cluster.celebornMasterEndpoint(1), cluster.celebornMasterEndpoint(2), cluster.celebornMasterEndpoint(3));
      String[][] runs = {
        {"uniffle-" + uniffleType, quorum, "uniffle"},
        {"celeborn-" + writer, masters, "celeborn"},
      };
      for (String[] run : runs) {
        String client = run[0];
        MixedProtocolTest.Outcome o = childJob(cluster, vanilla.value(), client, run[1], records, dir);
        StringBuilder line = new StringBuilder(String.format("fleet %-16s %6d ms, wrote %s; per node:",
            client, o.end() - o.start(), SparkHarness.mb(o.written())));
        for (int i = 1; i <= 3; i++) {
          long w = written(cluster, i, run[2]);
          line.append(' ').append(SparkHarness.mb(w));
          if (w <= 0) {
            throw new AssertionError("node " + i + " stored nothing of the " + client + " job: "
                + cluster.adminGet(i, "/api/v1/migration"));
          }
        }
        System.out.println("[timing] " + line);
        SparkHarness.appendTiming(line.toString());
      }

      // Celeborn with replication: every push is held on two nodes. Node 3 is killed (-9)
      // between the job that wrote the shuffle and the job that reads it again, and the second
      // read, from the surviving replicas, equals vanilla.
      long before = 0;
      for (int i = 1; i <= 3; i++) {
        before += written(cluster, i, "celeborn");
      }
      final long[] stored = {before};
      SparkConf conf = SparkHarness.withCeleborn(SparkHarness.baseConf("fleet-replicated", "local[2]"), masters, writer)
          .set("spark.celeborn.client.push.replicate.enabled", "true")
          // A reader that cannot reach the dead primary moves to the replica: fewer and shorter
          // connect retries (3 x 5 s by default), and the failed worker skipped afterwards.
          .set("spark.celeborn.data.io.maxRetries", "1")
          .set("spark.celeborn.data.io.retryWait", "1s")
          .set("spark.celeborn.client.fetch.excludeWorkerOnFailure.enabled", "true");
      SparkHarness.Timed<List<Jobs.PartitionDigest>> replicated = SparkHarness.runApp(conf, spark ->
          Jobs.reusedShuffle(spark, records, () -> {
            try {
              long now = 0;
              for (int i = 1; i <= 3; i++) {
                now += written(cluster, i, "celeborn");
              }
              stored[0] = now - stored[0];
              System.out.printf("[suite] fleet: replicated shuffle stored %s over 3 nodes; killing node 3%n",
                  SparkHarness.mb(stored[0]));
              cluster.kill(3);
            } catch (Exception e) {
              throw new RuntimeException(e);
            }
          }));
      Compare.sameList("fleet: replicated celeborn, node 3 killed before the second read", vanilla.value(), replicated.value());
      // Both jobs read the shuffle; it was written once, as two copies.
      long wrote = replicated.shuffleBytesWritten();
      String line = String.format("fleet celeborn-replicated %6d ms, wrote %s, stored %s on the nodes (%.2fx), node 3 killed between the jobs",
          replicated.jobMillis(), SparkHarness.mb(wrote), SparkHarness.mb(stored[0]), stored[0] / (double) Math.max(1, wrote));
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      if (stored[0] < 1.8 * wrote) {
        throw new AssertionError("replication on, but the nodes stored " + stored[0] + " bytes for " + wrote + " written");
      }
    }
  }

  /** Counts failed tasks; runs {@code action} (on its own thread) once {@code after} map tasks ended. */
  static final class MapStageTrigger extends org.apache.spark.scheduler.SparkListener {
    final java.util.concurrent.atomic.AtomicInteger mapTasksDone = new java.util.concurrent.atomic.AtomicInteger();
    final java.util.concurrent.atomic.AtomicInteger failedTasks = new java.util.concurrent.atomic.AtomicInteger();
    final java.util.concurrent.atomic.AtomicBoolean fired = new java.util.concurrent.atomic.AtomicBoolean();
    final int after;
    final Runnable action;
    volatile Thread thread;

    MapStageTrigger(int after, Runnable action) {
      this.after = after;
      this.action = action;
    }

    @Override
    public void onTaskEnd(org.apache.spark.scheduler.SparkListenerTaskEnd end) {
      if (!(end.reason() instanceof org.apache.spark.Success$)) {
        failedTasks.incrementAndGet();
      }
      if (end.taskType().equals("ShuffleMapTask") && mapTasksDone.incrementAndGet() >= after
          && fired.compareAndSet(false, true)) {
        thread = new Thread(action, "fleet-kill");
        thread.start();
      }
    }
  }

  /**
   * Celeborn with replication, node 3 killed (SIGKILL) in the middle of the map stage: pushes to
   * it fail and the client revives them onto the other two nodes, whose copies (primaries and the
   * replicas of node 3's primaries) carry the rest. The result equals vanilla.
   */
  @Test
  void celebornReplicatedJobSurvivesANodeKilledDuringTheMapStage() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L);
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-fleet-kill", "local[2]"), spark -> Jobs.largeShuffle(spark, records));
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-kill", 3, "256MiB", FLEET_TOML)) {
      waitForWorkers(cluster, 3);
      String masters = String.join(",",
          cluster.celebornMasterEndpoint(1), cluster.celebornMasterEndpoint(2), cluster.celebornMasterEndpoint(3));
      SparkConf conf = SparkHarness.withCeleborn(SparkHarness.baseConf("fleet-kill-map", "local[2]"), masters, writer)
          .set("spark.celeborn.client.push.replicate.enabled", "true")
          .set("spark.celeborn.data.io.maxRetries", "1")
          .set("spark.celeborn.data.io.retryWait", "1s")
          .set("spark.celeborn.client.fetch.excludeWorkerOnFailure.enabled", "true");
      MapStageTrigger trigger = new MapStageTrigger(Jobs.LARGE_MAPS / 3, () -> {
        System.out.println("[suite] fleet: killing node 3 during the map stage");
        cluster.kill(3);
      });
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark -> {
        spark.sparkContext().addSparkListener(trigger);
        return Jobs.largeShuffle(spark, records);
      });
      if (!trigger.fired.get()) {
        throw new AssertionError("the map stage ended before node 3 was killed");
      }
      trigger.thread.join();
      Compare.sameList("fleet: replicated celeborn, node 3 killed during the map stage", vanilla.value(), run.value());
      String line = String.format("fleet celeborn-replicated kill-during-map %6d ms, wrote %s, failed tasks %d",
          run.jobMillis(), SparkHarness.mb(run.shuffleBytesWritten()), trigger.failedTasks.get());
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
    }
  }

  /**
   * Celeborn's authentication over three nodes: every node runs with {@code celeborn.auth_enabled},
   * the stock client with {@code spark.celeborn.auth.enabled=true}. The driver registers its secret
   * on the first master only; the executors authenticate on every worker, and the workers of the
   * other nodes fetch the secret from the coordinators. The result equals vanilla, every node stored
   * part of it, and the other nodes counted fetched secrets.
   */
  @Test
  void celebornJobWithAuthenticationSpreadsOverThreeNodes() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L) / 2;
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-fleet-auth", "local[2]"), spark -> Jobs.largeShuffle(spark, records));
    try (SwitchyardCluster cluster = SwitchyardCluster.start(
        "fleet-auth", 3, "256MiB", FLEET_TOML + "\n[celeborn]\nauth_enabled = true\n")) {
      waitForWorkers(cluster, 3);
      String masters = String.join(",",
          cluster.celebornMasterEndpoint(1), cluster.celebornMasterEndpoint(2), cluster.celebornMasterEndpoint(3));
      SparkConf conf = SparkHarness.withCeleborn(SparkHarness.baseConf("fleet-auth", "local[2]"), masters, writer)
          .set("spark.celeborn.auth.enabled", "true");
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run =
          SparkHarness.runApp(conf, spark -> Jobs.largeShuffle(spark, records));
      Compare.sameList("fleet: celeborn with authentication", vanilla.value(), run.value());
      StringBuilder line = new StringBuilder(String.format("fleet celeborn-auth %6d ms, wrote %s; per node:",
          run.jobMillis(), SparkHarness.mb(run.shuffleBytesWritten())));
      for (int i = 1; i <= 3; i++) {
        long w = written(cluster, i, "celeborn");
        line.append(' ').append(SparkHarness.mb(w));
        if (w <= 0) {
          throw new AssertionError("node " + i + " stored nothing of the authenticated job");
        }
      }
      for (int i = 2; i <= 3; i++) {
        double fetched = SwitchyardProcess.metricSum(
            cluster.adminGet(i, "/metrics"), "switchyard_celeborn_auth_total", "result=\"fetched\"");
        if (fetched < 1) {
          throw new AssertionError("node " + i + " fetched no secret from the coordinators");
        }
      }
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line.toString());
    }
  }

  /**
   * A replicated Celeborn shuffle with a single reduce partition has its primary and its replica
   * on two of the three nodes; the third is only a spare in the master's slot reply. One of the
   * two is killed during the map stage: the driver revives onto a new pair from the workers of
   * that reply, which without the spare is one worker, too few for a replicated revive (the
   * pushes fail with SLOT_NOT_AVAILABLE and so does the job). With it, the result equals vanilla.
   */
  @Test
  void celebornRevivesOntoASpareWorker() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L) / 2;
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-fleet-spare", "local[2]"), spark -> Jobs.largeShuffle(spark, records, 1));
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-spare", 3, "256MiB", FLEET_TOML)) {
      waitForWorkers(cluster, 3);
      String masters = String.join(",",
          cluster.celebornMasterEndpoint(1), cluster.celebornMasterEndpoint(2), cluster.celebornMasterEndpoint(3));
      SparkConf conf = SparkHarness.withCeleborn(SparkHarness.baseConf("fleet-spare", "local[2]"), masters, writer)
          .set("spark.celeborn.client.push.replicate.enabled", "true")
          .set("spark.celeborn.data.io.maxRetries", "1")
          .set("spark.celeborn.data.io.retryWait", "1s")
          .set("spark.celeborn.client.fetch.excludeWorkerOnFailure.enabled", "true");
      final int[] killed = {0};
      final int[] holders = {0};
      MapStageTrigger trigger = new MapStageTrigger(Jobs.LARGE_MAPS / 3, () -> {
        try {
          // The driver's master is node 1; kill a holder of the partition that is not node 1.
          for (int i = 1; i <= 3; i++) {
            if (written(cluster, i, "celeborn") > 0) {
              holders[0]++;
              if (i != 1) {
                killed[0] = i;
              }
            }
          }
          System.out.printf("[suite] fleet: %d nodes hold the one partition; killing node %d%n", holders[0], killed[0]);
          if (killed[0] != 0) {
            cluster.kill(killed[0]);
          }
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
      });
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark -> {
        spark.sparkContext().addSparkListener(trigger);
        return Jobs.largeShuffle(spark, records, 1);
      });
      if (!trigger.fired.get()) {
        throw new AssertionError("the map stage ended before a node was killed");
      }
      trigger.thread.join();
      if (holders[0] != 2 || killed[0] == 0) {
        throw new AssertionError("expected the partition on exactly two nodes, found " + holders[0]);
      }
      Compare.sameList("fleet: single-partition replicated celeborn, a holder killed during the map stage",
          vanilla.value(), run.value());
      String line = String.format("fleet celeborn-replicated revive-to-spare %6d ms, wrote %s, failed tasks %d",
          run.jobMillis(), SparkHarness.mb(run.shuffleBytesWritten()), trigger.failedTasks.get());
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
    }
  }

  /**
   * Uniffle with two replicas per block (written to both, read from one), node 3 killed between
   * the job that wrote the shuffle and the one that reads it again: the readers fall back to the
   * surviving replica. The result equals vanilla.
   */
  @Test
  void uniffleReplicatedShuffleSurvivesANodeKilledBetweenTwoJobs() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-fleet-uniffle", "local[2]"), spark -> Jobs.largeShuffle(spark, records));
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-uniffle", 3, "256MiB", FLEET_TOML)) {
      waitForWorkers(cluster, 3);
      SparkConf conf = SparkHarness.withUniffle(SparkHarness.baseConf("fleet-uniffle-replica", "local[2]"),
              cluster.coordinatorQuorum(), SparkHarness.clientType())
          .set("spark.rss.data.replica", "2")
          .set("spark.rss.data.replica.write", "2")
          .set("spark.rss.data.replica.read", "1");
      final long[] stored = {0};
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark ->
          Jobs.reusedShuffle(spark, records, () -> {
            try {
              for (int i = 1; i <= 3; i++) {
                stored[0] += written(cluster, i, "uniffle");
              }
            } catch (Exception e) {
              throw new RuntimeException(e);
            }
            System.out.printf("[suite] fleet: uniffle stored %s over 3 nodes; killing node 3%n", SparkHarness.mb(stored[0]));
            cluster.kill(3);
          }));
      Compare.sameList("fleet: uniffle 2 replicas, node 3 killed before the second read", vanilla.value(), run.value());
      long wrote = run.shuffleBytesWritten();
      String line = String.format("fleet uniffle-replicated %6d ms, wrote %s, stored %s on the nodes (%.2fx), node 3 killed between the jobs",
          run.jobMillis(), SparkHarness.mb(wrote), SparkHarness.mb(stored[0]), stored[0] / (double) Math.max(1, wrote));
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      if (stored[0] < 1.8 * wrote) {
        throw new AssertionError("two replicas, but the nodes stored " + stored[0] + " bytes for " + wrote + " written");
      }
    }
  }

  /**
   * Celeborn without replication, node 3 killed between the job that wrote the shuffle and the
   * one that reads it again: its partitions are lost, the readers report a fetch failure
   * ({@code throwsFetchFailure}), Spark reruns the map stage onto the two live nodes, and the
   * result equals vanilla (never a short or wrong one).
   */
  @Test
  void celebornUnreplicatedDataLossRerunsTheStage() throws Exception {
    long records = Long.getLong("switchyard.fleet.records", 1_000_000L);
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-fleet-loss", "local[2]"), spark -> Jobs.largeShuffle(spark, records));
    try (SwitchyardCluster cluster = SwitchyardCluster.start("fleet-loss", 3, "256MiB", FLEET_TOML)) {
      waitForWorkers(cluster, 3);
      String masters = String.join(",",
          cluster.celebornMasterEndpoint(1), cluster.celebornMasterEndpoint(2), cluster.celebornMasterEndpoint(3));
      SparkConf conf = SparkHarness.withCeleborn(SparkHarness.baseConf("fleet-loss", "local[2]"), masters, writer)
          .set("spark.celeborn.client.spark.fetch.throwsFetchFailure", "true")
          .set("spark.celeborn.data.io.maxRetries", "1")
          .set("spark.celeborn.data.io.retryWait", "1s");
      MapStageTrigger failures = new MapStageTrigger(Integer.MAX_VALUE, () -> {});
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(conf, spark -> {
        spark.sparkContext().addSparkListener(failures);
        return Jobs.reusedShuffle(spark, records, () -> cluster.kill(3));
      });
      Compare.sameList("fleet: unreplicated celeborn, node 3 killed before the second read", vanilla.value(), run.value());
      String line = String.format("fleet celeborn-unreplicated loss %6d ms, failed tasks %d (fetch failures, then the stage reran)",
          run.jobMillis(), failures.failedTasks.get());
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);
      if (failures.failedTasks.get() == 0) {
        throw new AssertionError("node 3's partitions were lost, yet no task failed: were they read at all?");
      }
    }
  }
}
