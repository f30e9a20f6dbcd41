package dev.switchyard.it;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.apache.celeborn.client.ShuffleClientImpl.ReduceFileGroups;
import org.apache.celeborn.common.protocol.PartitionLocation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * Celeborn's Flink client path (MAP partitions, credit-based reads) against switchyard, driven by
 * the real Celeborn 0.5.4 LifecycleManager, transport client and message classes from the Spark
 * client jar, following the Flink plugin's sequence call for call ({@link FlinkDriver}). One
 * LifecycleManager, one shuffle written by the first scenario and read by the others. Where the
 * servers run is the subclass's: one node ({@link CelebornFlinkDriverTest}) or a fleet ({@link
 * FleetFlinkDriverTest}).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@Timeout(value = 3, unit = TimeUnit.MINUTES)
abstract class FlinkDriverScenarios {

  static final int MAPPERS = 8;
  static final int SUBS = 16;
  static final int REGIONS = 3;
  static final int BUFFER_SIZE = 32 * 1024;
  static final int IDLE_SECONDS = 20;

  FlinkDriver driver;
  FlinkDriverClient tm;
  FlinkDriver.Dataset data;
  boolean written;

  /** Starts the servers; the Celeborn master endpoints, comma separated. */
  abstract String startServers() throws Exception;

  abstract void stopServers();

  /** What the servers logged last, for a failure message. */
  abstract String serverLogs();

  /** The admin URLs of the servers, each of which must be alive and healthy. */
  abstract List<String> adminUrls();

  /** Whether the driver and its TaskManagers run with {@code celeborn.auth.enabled}. */
  boolean authEnabled() {
    return false;
  }

  /** Checks of the subclass on the written dataset (where its partitions went). */
  void afterWrite(FlinkDriver.Dataset data) throws Exception {}

  /**
   * Kills (SIGKILL) and restarts, on the same data dir and ports, a node that holds map
   * partitions of {@code data}, checking that it recovered some; returns a line describing it, or
   * null where the subclass's servers cannot restart.
   */
  String killAndRestartANodeWith(FlinkDriver.Dataset data) throws Exception {
    return null;
  }

  @BeforeAll
  void start() throws Exception {
    System.out.printf("[suite] %s, celeborn client %s%n", getClass().getSimpleName(), SparkHarness.celebornLabel());
    driver = new FlinkDriver(startServers(), authEnabled());
    tm = driver.newTaskManager();
  }

  @AfterAll
  void stop() {
    if (driver != null) {
      driver.close();
    }
    stopServers();
  }

  AssertionError withLog(String msg) {
    return new AssertionError(msg + "\n" + serverLogs());
  }

  private void requireData() {
    if (!written) {
      throw new AssertionError("the shuffle of mapTasksWriteRegionsAndCommit was not written; nothing to read");
    }
  }

  private void assertHealthy() throws Exception {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    for (String url : adminUrls()) {
      HttpResponse<String> r;
      try {
        r = http.send(HttpRequest.newBuilder(URI.create(url + "/healthz"))
            .timeout(Duration.ofSeconds(5)).build(), HttpResponse.BodyHandlers.ofString());
      } catch (java.io.IOException e) {
        throw withLog("GET " + url + "/healthz: " + e);
      }
      if (r.statusCode() != 200) {
        throw withLog("GET " + url + "/healthz: HTTP " + r.statusCode() + ": " + r.body());
      }
    }
  }

  /**
   * Scenario 1: 8 map tasks, each 3 regions over 16 sub-partitions (map tasks 1, 4, 7 have a
   * broadcast region 1) plus the EndOfPartition broadcast region, buffers of 24 B to 32 KiB
   * packed as the Flink plugin packs them; then MapperEnd per task (the LifecycleManager's MAP
   * commit handler commits that task's partition). Every MapperEnd must succeed, and the file
   * groups must list every partition, each with the one location its task wrote (no revive).
   */
  @Test
  @Order(1)
  void mapTasksWriteRegionsAndCommit() throws Exception {
    data = driver.newDataset(MAPPERS, SUBS, REGIONS, BUFFER_SIZE, 20261201L);
    long t0 = System.nanoTime();
    List<String> failures = driver.writeAll(tm, data, 4);
    long ms = (System.nanoTime() - t0) / 1_000_000;
    if (!failures.isEmpty()) {
      throw withLog("map tasks failed:\n  " + String.join("\n  ", failures));
    }
    ReduceFileGroups groups = driver.fileGroups(tm, data);
    Set<Integer> expectedIds = FlinkDriver.partitionIdSet(data);
    if (!new TreeSet<>(groups.partitionIds).equals(expectedIds)) {
      throw withLog("GetReducerFileGroup lists partitions " + new TreeSet<>(groups.partitionIds) + ", expected "
          + expectedIds);
    }
    for (int m = 0; m < MAPPERS; m++) {
      int p = data.partitionIds[m];
      Set<PartitionLocation> locs = groups.partitionGroups.get(p);
      if (locs == null || locs.size() != 1) {
        throw withLog("partition " + p + " (map " + m + ") has locations " + locs + ", expected exactly one");
      }
      PartitionLocation loc = locs.iterator().next();
      if (loc.getEpoch() != 0 || !loc.getUniqueId().equals(data.location(m).getUniqueId())) {
        throw withLog("partition " + p + " committed location " + loc + ", but map " + m + " wrote to "
            + data.location(m));
      }
    }
    written = true;
    afterWrite(data);
    String line = String.format("flink-write    %d map tasks x %d regions x %d subs: %s pushed in %d ms",
        MAPPERS, REGIONS + 1, SUBS, SparkHarness.mb(data.pushedBytes()), ms);
    System.out.println("[timing] " + line);
    SparkHarness.appendTiming(line);
  }

  private List<FlinkDriver.ReadResult> read(String label, List<FlinkDriver.ReadSpec> specs) throws Exception {
    long t0 = System.nanoTime();
    List<FlinkDriver.ReadResult> results;
    try {
      results = driver.readAll(tm, data, specs, IDLE_SECONDS);
    } catch (AssertionError e) {
      throw withLog(e.getMessage());
    }
    long ms = (System.nanoTime() - t0) / 1_000_000;
    if (results.size() != specs.size() * MAPPERS) {
      throw new AssertionError(results.size() + " streams read, expected " + specs.size() * MAPPERS);
    }
    long bytes = results.stream().mapToLong(FlinkDriver.ReadResult::bytes).sum();
    int records = results.stream().mapToInt(FlinkDriver.ReadResult::records).sum();
    String line = String.format("%-14s %d streams, %d records, %s in %d ms", label, results.size(), records,
        SparkHarness.mb(bytes), ms);
    System.out.println("[timing] " + line);
    SparkHarness.appendTiming(line);
    if (tm.getReadClientHandler().unknownRpcs() != 0) {
      throw new AssertionError(tm.getReadClientHandler().unknownRpcs() + " RpcRequests from the server of unknown type");
    }
    return results;
  }

  /**
   * Scenario 2, one sub-partition per reader: each reader reads all 8 partitions, two at a time,
   * with a pool of 2 or 4 buffers (initial credit 0, credit from backlog announcements, as Flink
   * does), or with initial credit 2 and one credit back per buffer consumed. Every body, its
   * order and the stream end are checked ({@link FlinkDriver#drain}).
   */
  @Test
  @Order(2)
  void readersOfOneSubPartition() throws Exception {
    requireData();
    var pool = FlinkStreamReader.CreditMode.POOL;
    read("flink-read-1", List.of(
        new FlinkDriver.ReadSpec("first", 0, 0, pool, 0, 4, 2),
        new FlinkDriver.ReadSpec("one", 5, 5, pool, 0, 2, 2),
        new FlinkDriver.ReadSpec("last", SUBS - 1, SUBS - 1, pool, 0, 4, 1),
        new FlinkDriver.ReadSpec("per-consumed", 8, 8, FlinkStreamReader.CreditMode.PER_CONSUMED, 2, 0, 2)));
  }

  /**
   * Scenario 2, sub-partition ranges (inclusive end): the whole range, a middle one, and one read
   * with initial credit 2 plus a credit per buffer consumed. A broadcast region reaches such a
   * reader once per sub-partition of its range, as Celeborn's worker serves it (its index gives
   * every sub-partition of a broadcast region the entry of sub-partition 0); Flink's input gate
   * counts one EndOfPartition event per sub-partition of the range and waits for all of them.
   */
  @Test
  @Order(3)
  void readersOfSubPartitionRanges() throws Exception {
    requireData();
    var pool = FlinkStreamReader.CreditMode.POOL;
    read("flink-read-n", List.of(
        new FlinkDriver.ReadSpec("all", 0, SUBS - 1, pool, 0, 4, 2),
        new FlinkDriver.ReadSpec("middle", 3, 9, pool, 0, 4, 2),
        new FlinkDriver.ReadSpec("per-consumed", 2, 6, FlinkStreamReader.CreditMode.PER_CONSUMED, 2, 0, 2)));
  }

  /** The (map, sub-partition) whose single-sub-partition stream has the most records. */
  private int[] longestStream() {
    int[] best = {0, 0};
    int most = -1;
    for (int m = 0; m < MAPPERS; m++) {
      for (int sub = 0; sub < SUBS; sub++) {
        int n = FlinkDriver.expected(data, m, sub, sub).size();
        if (n > most) {
          most = n;
          best = new int[] {m, sub};
        }
      }
    }
    if (most < 6) {
      throw new IllegalStateException("no stream of 6 records or more in the data set");
    }
    return best;
  }

  private static FlinkStreamReader.Event next(FlinkStreamReader r, int seconds) throws InterruptedException {
    FlinkStreamReader.Event ev = r.events().poll(seconds, TimeUnit.SECONDS);
    if (ev == null) {
      throw new AssertionError(r.name() + ": nothing within " + seconds + " s (granted " + r.granted() + ", received "
          + r.received() + ")");
    }
    return ev;
  }

  private static void expectData(FlinkStreamReader r, FlinkDriver.Expected e, int seconds) throws InterruptedException {
    FlinkStreamReader.Event ev = next(r, seconds);
    if (ev.kind() != FlinkStreamReader.Kind.DATA) {
      throw new AssertionError(r.name() + ": expected " + e.what() + ", got " + ev.kind() + " " + ev.error());
    }
    if (!java.util.Arrays.equals(e.bytes(), ev.data())) {
      throw new AssertionError(r.name() + ": expected " + e.what() + ": " + FlinkDriver.describe(e.bytes()) + "; got "
          + FlinkDriver.describe(ev.data()));
    }
  }

  /** Asserts that no READ_DATA comes for {@code millis} (the reader has no credit left). */
  private static void expectSilence(FlinkStreamReader r, long millis) throws InterruptedException {
    FlinkStreamReader.Event ev = r.events().poll(millis, TimeUnit.MILLISECONDS);
    if (ev != null) {
      throw new AssertionError(r.name() + ": with every credit used (granted " + r.granted() + "), the server still sent "
          + ev.kind() + (ev.data() != null ? " " + FlinkDriver.describe(ev.data()) : "")
          + (ev.error() != null ? " " + ev.error() : ""));
    }
    if (!r.violations().isEmpty()) {
      throw new AssertionError(r.name() + ": " + r.violations());
    }
  }

  /**
   * Scenario 2, back-pressure: initial credit 2 and no more: exactly two READ_DATA, then nothing
   * for 1.5 s; then credit 1 per buffer consumed until the end of the stream.
   */
  @Test
  @Order(4)
  void backPressureHoldsWithoutCredit() throws Exception {
    requireData();
    int[] ms = longestStream();
    int m = ms[0];
    int sub = ms[1];
    List<FlinkDriver.Expected> exp = FlinkDriver.expected(data, m, sub, sub);
    FlinkStreamReader r = new FlinkStreamReader("back-pressure map " + m + " sub " + sub, tm, data.shuffleId,
        data.partitionIds[m], sub, sub, BUFFER_SIZE, FlinkStreamReader.CreditMode.MANUAL, null);
    r.open(2);
    try {
      expectData(r, exp.get(0), IDLE_SECONDS);
      expectData(r, exp.get(1), IDLE_SECONDS);
      expectSilence(r, 1500);
      r.grant(1);
      expectData(r, exp.get(2), IDLE_SECONDS);
      expectSilence(r, 500);
      r.grant(2);
      FlinkDriver.ReadResult res = FlinkDriver.drain(r, exp, 3, IDLE_SECONDS, i -> r.grant(1));
      System.out.printf("[flink] back-pressure reader: %d records after the pauses, %d backlog announcements%n",
          res.records(), res.backlogs());
    } catch (AssertionError e) {
      throw withLog(e.getMessage());
    } finally {
      r.close();
    }
  }

  /**
   * Scenario 3: a reader that stops granting credit (left open), a reader whose connection is
   * closed mid-stream (its own TaskManager client), and one that cancels mid-stream (client-side
   * BUFFER_STREAM_END); the gateway stays healthy and new readers, on both TaskManagers, get
   * everything.
   */
  @Test
  @Order(5)
  void stalledAndDeadReadersLeaveTheGatewayHealthy() throws Exception {
    requireData();
    int[] ms = longestStream();
    int m = ms[0];
    int sub = ms[1];
    List<FlinkDriver.Expected> exp = FlinkDriver.expected(data, m, sub, sub);
    String what = "map " + m + " sub " + sub;
    FlinkStreamReader stalled = new FlinkStreamReader("stalled " + what, tm, data.shuffleId, data.partitionIds[m], sub,
        sub, BUFFER_SIZE, FlinkStreamReader.CreditMode.MANUAL, null);
    FlinkDriverClient tm2 = driver.newTaskManager();
    FlinkStreamReader dead = new FlinkStreamReader("dead-connection " + what, tm2, data.shuffleId,
        data.partitionIds[m], sub, sub, BUFFER_SIZE, FlinkStreamReader.CreditMode.MANUAL, null);
    FlinkStreamReader cancelled = new FlinkStreamReader("cancelled " + what, tm, data.shuffleId,
        data.partitionIds[m], sub, sub, BUFFER_SIZE, FlinkStreamReader.CreditMode.POOL,
        new FlinkStreamReader.CreditPool(4, BUFFER_SIZE));
    try {
      stalled.open(1);
      expectData(stalled, exp.get(0), IDLE_SECONDS);

      dead.open(3);
      expectData(dead, exp.get(0), IDLE_SECONDS);
      expectData(dead, exp.get(1), IDLE_SECONDS);
      dead.bufferStream().getClient().close();
      FlinkStreamReader.Event ev;
      do {
        ev = next(dead, 10);
      } while (ev.kind() == FlinkStreamReader.Kind.DATA);
      if (ev.kind() != FlinkStreamReader.Kind.ERROR) {
        throw new AssertionError("dead-connection reader: expected the lost-connection error, got " + ev.kind());
      }

      cancelled.open(0);
      for (int i = 0; i < 3; i++) {
        expectData(cancelled, exp.get(i), IDLE_SECONDS);
        cancelled.consumed();
      }
      cancelled.close();

      assertHealthy();
      expectSilence(stalled, 10);
      // new readers while the stalled stream is still open: every sub-partition of every
      // partition, one reader per sub-partition, on tm
      List<FlinkDriver.ReadSpec> specs = new ArrayList<>();
      for (int s = 0; s < SUBS; s++) {
        specs.add(new FlinkDriver.ReadSpec("after-sub" + s, s, s, FlinkStreamReader.CreditMode.POOL, 0, 2, 1));
      }
      List<FlinkDriver.ReadResult> res = read("flink-reread", specs);
      // and the TaskManager that lost its connection reads again (a new connection)
      FlinkStreamReader again = new FlinkStreamReader("tm2 again " + what, tm2, data.shuffleId, data.partitionIds[m],
          sub, sub, BUFFER_SIZE, FlinkStreamReader.CreditMode.POOL, new FlinkStreamReader.CreditPool(4, BUFFER_SIZE));
      again.open(0);
      FlinkDriver.drain(again, exp, 0, IDLE_SECONDS, null);
      System.out.printf("[flink] after the stalled/dead/cancelled readers: %d streams read in full%n", res.size() + 1);

      // the stalled reader got nothing beyond its one credit all along
      expectSilence(stalled, 10);
      if (stalled.received() != 1) {
        throw new AssertionError("stalled reader received " + stalled.received() + " buffers with 1 credit");
      }
      stalled.close();
      assertHealthy();
    } catch (AssertionError e) {
      throw withLog(e.getMessage());
    } finally {
      stalled.close();
      dead.close();
      cancelled.close();
    }
  }

  /**
   * Bad input: OPEN_STREAM for a file the worker does not have (an unknown partition id, and an
   * unknown shuffle key) must come back as an RPC failure (the reader's TRANSPORTABLE_ERROR), not
   * hang.
   */
  @Test
  @Order(6)
  void openStreamOnUnknownFileFails() throws Exception {
    requireData();
    PartitionLocation real = data.location(0);
    PartitionLocation unknown = new PartitionLocation(9999, 0, real.getHost(), real.getRpcPort(), real.getPushPort(),
        real.getFetchPort(), real.getReplicatePort(), PartitionLocation.Mode.PRIMARY);
    List<String> seen = new ArrayList<>();
    for (Object[] c : new Object[][] {
        {"unknown file", driver.shuffleKey(data.shuffleId), unknown},
        {"unknown shuffle", driver.shuffleKey(data.shuffleId) + "404", real}}) {
      FlinkStreamReader r = new FlinkStreamReader((String) c[0], tm, data.shuffleId, -1, 0, SUBS - 1, BUFFER_SIZE,
          FlinkStreamReader.CreditMode.MANUAL, null);
      long t0 = System.nanoTime();
      r.openOn((String) c[1], (PartitionLocation) c[2], 2);
      FlinkStreamReader.Event ev = r.events().poll(15, TimeUnit.SECONDS);
      long ms = (System.nanoTime() - t0) / 1_000_000;
      r.close();
      if (ev == null) {
        throw withLog(c[0] + ": OPEN_STREAM got no answer within 15 s");
      }
      if (ev.kind() != FlinkStreamReader.Kind.ERROR) {
        throw withLog(c[0] + ": OPEN_STREAM answered with " + ev.kind() + " instead of a failure");
      }
      seen.add(String.format("%s: failed in %d ms: %s", c[0], ms,
          ev.error().lines().findFirst().orElse("")));
    }
    seen.forEach(s -> System.out.println("[flink] " + s));
    assertHealthy();
  }

  /**
   * Bad input on the write side: within a region a map task writes sub-partition 3, then 1. The
   * worker must refuse the second push (Celeborn: "Must writing data in reduce partition index
   * order"); the client records the failure and the task's MapperEnd fails with it, as in Flink.
   */
  @Test
  @Order(7)
  void subPartitionsOutOfOrderFailTheMapTask() throws Exception {
    FlinkDriver.Dataset d = driver.newDataset(1, 4, 1, BUFFER_SIZE, 7L);
    FlinkOutputGate gate = new FlinkOutputGate(tm, d.shuffleId, 0, 0, d.partitionIds[0], d.numSubs, BUFFER_SIZE, 1,
        driver.conf.clientPushMaxReviveTimes());
    Throwable failure = null;
    try {
      d.startRegion(0, 0);
      gate.regionStart(false);
      gate.write(FlinkOutputGate.flinkBuffer(BUFFER_SIZE, FlinkOutputGate.DATA_BUFFER, d.bufferData(0, 0, 3, 0)), 3);
      gate.write(FlinkOutputGate.flinkBuffer(BUFFER_SIZE, FlinkOutputGate.DATA_BUFFER, d.bufferData(0, 0, 1, 0)), 1);
      gate.regionFinish();
      gate.finish();
    } catch (java.io.IOException e) {
      failure = e;
    } finally {
      gate.close();
    }
    if (failure == null) {
      throw withLog("a map task that wrote sub-partition 1 after 3 in one region ended without an error");
    }
    StringBuilder chain = new StringBuilder();
    for (Throwable t = failure; t != null; t = t.getCause()) {
      chain.append(t).append(" <- ");
    }
    System.out.println("[flink] out-of-order sub-partitions: " + chain);
    if (!chain.toString().contains("order")) {
      throw withLog("the map task failed, but not for the sub-partition order: " + chain);
    }
    assertHealthy();
  }

  /**
   * Restart: a node holding committed map partitions is killed -9 and started again. Readers of
   * the same LifecycleManager (its file groups unchanged) read every partition again, whole
   * ranges and single sub-partitions, and get every buffer: the node served its map partitions'
   * regions from the manifest, not from memory.
   */
  @Test
  @Order(8)
  void readersAfterANodeRestartGetEverything() throws Exception {
    requireData();
    String restarted = killAndRestartANodeWith(data);
    org.junit.jupiter.api.Assumptions.assumeTrue(restarted != null, "these servers cannot restart");
    var pool = FlinkStreamReader.CreditMode.POOL;
    read("flink-restart", List.of(
        new FlinkDriver.ReadSpec("all", 0, SUBS - 1, pool, 0, 4, 2),
        new FlinkDriver.ReadSpec("one", 5, 5, pool, 0, 2, 2),
        new FlinkDriver.ReadSpec("per-consumed", 2, 6, FlinkStreamReader.CreditMode.PER_CONSUMED, 2, 0, 2)));
    System.out.println("[timing] flink-restart  " + restarted);
    SparkHarness.appendTiming("flink-restart  " + restarted);
    assertHealthy();
  }
}
