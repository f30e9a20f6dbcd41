package dev.switchyard.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.switchyard.it.SwitchyardProcess;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.security.CodeSource;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Flink 1.20 batch jobs in a local MiniCluster (in this JVM) with the stock Celeborn Flink client
 * against one switchyard, each compared with the same job on Flink's own blocking shuffle. Each
 * job runs in blocking mode ({@code RemoteShuffleServiceFactory}, MAP partitions, credit-based
 * reads) and, in the {@code hybrid*} tests, in Flink's hybrid shuffle with Celeborn as the remote
 * tier ({@code CelebornTierFactory}: segments, required-segment notifications, reads of partitions
 * still being written). The jobs: a word count over skewed words (aggregation with skew), a join
 * (Flink runs it as a co-group) followed by an aggregation (two stages), and a range-partitioned
 * sort.
 *
 * <p>The client jar is not on Maven Central: {@code CELEBORN_FLINK_CLIENT_JAR} names it (the
 * pom's profile {@code celeborn-flink-client} puts it and its companions on the classpath).
 * Without it every test is skipped.
 *
 * <p>Each job runs twice in a fresh per-job MiniCluster: on Flink's own shuffle, then through
 * switchyard. A run must finish within {@code switchyard.flink.jobTimeout} seconds (MiniCluster
 * start included): a client missing one of its companion jars makes the TaskManager fail to
 * build its shuffle environment and the job wait for slots instead of failing.
 *
 * <p>Silent bypass: the run through switchyard must grow the server's {@code appended_bytes} by
 * at least 1/{@value #MAX_COMPRESSION} of what Flink's tasks report as {@code numBytesOut} (bytes
 * written into the shuffle, counted before the client compresses them); the run on Flink's own
 * shuffle must not grow it at all. In hybrid mode it must grow by at least {@code numBytesOut}:
 * the remote tier carries every byte.
 */
@TestMethodOrder(MethodOrderer.MethodName.class)
class FlinkCelebornJobsTest {

  static final String JAR_ENV = "CELEBORN_FLINK_CLIENT_JAR";
  static final String FACTORY = "org.apache.celeborn.plugin.flink.RemoteShuffleServiceFactory";

  static final long JOB_TIMEOUT_S = Long.getLong("switchyard.flink.jobTimeout", 240);
  static final int SCALE = Integer.getInteger("switchyard.flink.scale", 1);
  static final Path WORK_DIR =
      Paths.get(System.getProperty("switchyard.flink.workDir", "target/flink-work")).toAbsolutePath();
  static final Path TIMINGS =
      Paths.get(System.getProperty("switchyard.flink.timings", "target/switchyard-flink-timings.txt"))
          .toAbsolutePath();

  static final String SKIP_MESSAGE =
      "skipped: " + JAR_ENV + " not set (path of a celeborn-client-flink-1.20-shaded_2.12 jar,"
          + " which Maven Central here does not serve; see integration/README.md, Flink)";

  /** Bound on the client's compression ratio for the bypass check (see {@link #compare}). */
  static final long MAX_COMPRESSION = 8;

  private static SwitchyardProcess server;

  @BeforeAll
  static void startServer() throws IOException {
    String jar = System.getenv(JAR_ENV);
    if (jar == null || jar.isBlank()) {
      System.out.println("[flink] " + SKIP_MESSAGE);
      return; // each test is then skipped (skipClientMissing), so surefire counts them
    }
    Path jarPath = Paths.get(jar).toAbsolutePath().normalize();
    if (!Files.isRegularFile(jarPath)) {
      Assertions.fail(JAR_ENV + "=" + jar + ": no such file");
    }
    checkClientClasspath(jarPath);
    Files.createDirectories(WORK_DIR.resolve("tmp"));
    server = SwitchyardProcess.startWithCeleborn("flink", "256MiB");
  }

  @BeforeEach
  void skipClientMissing() {
    Assumptions.assumeTrue(server != null, SKIP_MESSAGE);
  }

  @AfterAll
  static void stopServer() {
    if (server != null) {
      server.close();
      server = null;
    }
  }

  /**
   * The factory must come from the jar named by the environment (not some other copy), and the
   * companions a Flink distribution's lib/ supplies must be there: without them the job would
   * hang rather than fail.
   */
  static void checkClientClasspath(Path jar) {
    Class<?> factory;
    try {
      factory = Class.forName(FACTORY);
    } catch (ClassNotFoundException e) {
      throw new AssertionError(
          FACTORY + " not on the test classpath although " + JAR_ENV + "=" + jar + " is set"
              + " (the profile celeborn-flink-client should have added it)", e);
    }
    CodeSource src = factory.getProtectionDomain().getCodeSource();
    Path from;
    try {
      from = src == null ? null : Paths.get(src.getLocation().toURI()).toAbsolutePath().normalize();
    } catch (URISyntaxException e) {
      throw new AssertionError(e);
    }
    assertEquals(jar, from, FACTORY + " was loaded from another place than " + JAR_ENV);
    for (String c :
        new String[] {
          "scala.Option", // scala-library 2.12
          "com.codahale.metrics.MetricRegistry", // metrics-core 4.2
          "org.apache.commons.crypto.cipher.CryptoCipher", // commons-crypto
          "net.jpountz.lz4.LZ4Factory", // lz4-java
          "com.github.luben.zstd.Zstd", // zstd-jni
        }) {
      try {
        Class.forName(c, false, FlinkCelebornJobsTest.class.getClassLoader());
      } catch (ClassNotFoundException e) {
        throw new AssertionError("companion class " + c + " of the Celeborn Flink client is missing", e);
      }
    }
    System.out.println("[flink] Celeborn Flink client: " + jar);
  }

  @Test
  void joinAggregate() throws Exception {
    compare(FlinkJobs.JOIN, false);
  }

  @Test
  void sortByKey() throws Exception {
    compare(FlinkJobs.SORT, true);
  }

  @Test
  void wordCount() throws Exception {
    compare(FlinkJobs.WORD_COUNT, false);
  }

  // Hybrid shuffle with Celeborn as Flink's remote tier (CelebornTierFactory, segments).

  @Test
  void hybridJoinAggregate() throws Exception {
    compare(FlinkJobs.JOIN, false, Mode.HYBRID);
  }

  @Test
  void hybridSortByKey() throws Exception {
    compare(FlinkJobs.SORT, true, Mode.HYBRID);
  }

  @Test
  void hybridWordCount() throws Exception {
    compare(FlinkJobs.WORD_COUNT, false, Mode.HYBRID);
  }

  // ------------------------------------------------------------------ harness

  /** Settings of both runs: batch, blocking exchanges, loopback, no restart. */
  static Map<String, String> baseConf() {
    Map<String, String> c = new HashMap<>();
    c.put("execution.runtime-mode", "BATCH");
    c.put("execution.batch-shuffle-mode", "ALL_EXCHANGES_BLOCKING");
    c.put("jobmanager.rpc.address", "127.0.0.1");
    c.put("jobmanager.bind-host", "127.0.0.1");
    c.put("taskmanager.host", "127.0.0.1");
    c.put("taskmanager.bind-host", "127.0.0.1");
    c.put("rest.address", "127.0.0.1");
    c.put("rest.bind-address", "127.0.0.1");
    c.put("rest.bind-port", "0");
    // Room for the client's per-partition memory (celeborn.client.flink.resultPartition.memory
    // 64m, inputGate.memory 32m) with 5 subtasks, and for Flink's sort-merge shuffle.
    c.put("taskmanager.memory.network.min", "768m");
    c.put("taskmanager.memory.network.max", "768m");
    // A failed task fails the job: nothing retried behind the test's back.
    c.put("restart-strategy.type", "none");
    // A TaskManager that never offers slots fails the job instead of stalling it for 300 s.
    c.put("slot.request.timeout", "60000");
    c.put("io.tmp.dirs", WORK_DIR.resolve("tmp").toString());
    c.put("metrics.reporter.switchyard.factory.class", FlinkShuffleBytesReporter.Factory.class.getName());
    return c;
  }

  /** The Celeborn client on switchyard's master; keys as in docs/celeborn.md, fail-fast values. */
  static Map<String, String> celebornConf(String masterEndpoint) {
    Map<String, String> c = baseConf();
    c.put("shuffle-service-factory.class", FACTORY);
    c.put("celeborn.master.endpoints", masterEndpoint);
    // AUTO (the default) silently uses Flink's own shuffle when the master reports no worker.
    c.put("celeborn.client.flink.shuffle.fallback.policy", "NEVER");
    c.put("celeborn.client.push.replicate.enabled", "false");
    c.put("celeborn.network.connect.timeout", "5s");
    c.put("celeborn.network.timeout", "60s");
    c.put("celeborn.rpc.askTimeout", "30s");
    c.put("celeborn.rpc.lookupTimeout", "10s");
    c.put("celeborn.masterClient.rpc.askTimeout", "20s");
    c.put("celeborn.masterClient.maxRetries", "3");
    c.put("celeborn.client.rpc.maxRetries", "2");
    c.put("celeborn.client.registerShuffle.maxRetries", "2");
    c.put("celeborn.client.registerShuffle.retryWait", "1s");
    c.put("celeborn.client.reserveSlots.maxRetries", "2");
    c.put("celeborn.client.reserveSlots.retryWait", "1s");
    c.put("celeborn.client.push.timeout", "30s");
    c.put("celeborn.client.fetch.timeout", "30s");
    return c;
  }

  /**
   * Flink 1.20's hybrid shuffle with Celeborn as its remote tier, as Celeborn's deploy docs
   * configure it: Flink's own shuffle service, the tiered storage's external remote tier, and
   * consumers scheduled once all producers finished. With an external tier set, Flink 1.20
   * ({@code TierFactoryInitializer}) uses that tier alone: no memory or disk tier, so the remote
   * tier carries every byte.
   */
  static Map<String, String> hybridConf(String masterEndpoint) {
    Map<String, String> c = celebornConf(masterEndpoint);
    c.remove("shuffle-service-factory.class");
    c.put("execution.batch-shuffle-mode", "ALL_EXCHANGES_HYBRID_FULL");
    c.put(
        "taskmanager.network.hybrid-shuffle.external-remote-tier-factory.class",
        "org.apache.celeborn.plugin.flink.tiered.CelebornTierFactory");
    c.put("jobmanager.partition.hybrid.partition-data-consume-constraint", "ALL_PRODUCERS_FINISHED");
    return c;
  }

  /** How the run through switchyard shuffles. */
  enum Mode {
    /** RemoteShuffleServiceFactory, MAP partitions read as regions. */
    BLOCKING,
    /** Flink's hybrid shuffle, Celeborn as the remote tier (segments). */
    HYBRID
  }

  record Run(String runId, long millis, long bytesOut, int counters) {}

  /**
   * Runs {@code job} in a fresh per-job MiniCluster with {@code conf}; fails after {@link
   * #JOB_TIMEOUT_S} (cancelling the job) or on a job failure, with the server's log tail.
   */
  static Run run(FlinkJobs.Job job, String side, Map<String, String> conf) throws Exception {
    String runId = job.name() + "-" + side;
    FlinkJobs.reset(runId);
    FlinkShuffleBytesReporter.reset();
    StreamExecutionEnvironment env =
        StreamExecutionEnvironment.createLocalEnvironment(
            FlinkJobs.SOURCE_PARALLELISM, Configuration.fromMap(conf));
    job.build(env, runId, SCALE);
    AtomicReference<JobClient> client = new AtomicReference<>();
    ExecutorService pool =
        Executors.newSingleThreadExecutor(
            r -> {
              Thread t = new Thread(r, "flink-run-" + runId);
              t.setDaemon(true);
              return t;
            });
    long start = System.nanoTime();
    try {
      Future<?> done =
          pool.submit(
              () -> {
                JobClient c = env.executeAsync(runId);
                client.set(c);
                return c.getJobExecutionResult().get();
              });
      try {
        done.get(JOB_TIMEOUT_S, TimeUnit.SECONDS);
      } catch (TimeoutException e) {
        JobClient c = client.get();
        String state = "no job client yet (MiniCluster start or submission hung)";
        if (c != null) {
          try {
            state = "job status " + c.getJobStatus().get(5, TimeUnit.SECONDS);
            c.cancel().get(30, TimeUnit.SECONDS);
          } catch (Exception ce) {
            state += "; cancel: " + ce;
          }
        }
        done.cancel(true);
        throw new AssertionError(
            runId + " did not finish within " + JOB_TIMEOUT_S + " s (" + state + "). A missing"
                + " companion jar of the client (scala-library 2.12, metrics-core, commons-crypto,"
                + " lz4-java, zstd-jni) looks like this; see target/flink-it.log."
                + serverTail());
      } catch (ExecutionException e) {
        throw new AssertionError(
            runId + " failed: " + rootCause(e.getCause()) + " (full trace below; Flink log:"
                + " target/flink-it.log)" + serverTail(),
            e.getCause());
      }
    } finally {
      pool.shutdownNow();
    }
    long millis = (System.nanoTime() - start) / 1_000_000;
    return new Run(runId, millis, FlinkShuffleBytesReporter.bytesOut(), FlinkShuffleBytesReporter.counters());
  }

  static String serverTail() {
    return server == null ? "" : "\n" + server.logTail(40);
  }

  static String rootCause(Throwable t) {
    Throwable r = t;
    while (r.getCause() != null && r.getCause() != r) {
      r = r.getCause();
    }
    return r.toString();
  }

  /** The job on Flink's own shuffle, then through switchyard; results and bytes compared. */
  static void compare(FlinkJobs.Job job, boolean ordered) throws Exception {
    compare(job, ordered, Mode.BLOCKING);
  }

  static void compare(FlinkJobs.Job job, boolean ordered, Mode mode) throws Exception {
    long a0 = server.appendedBytes();
    Run vanilla = run(job, "vanilla", baseConf());
    long a1 = server.appendedBytes();
    checkJob(job, vanilla.runId());
    String endpoint = server.celebornMasterEndpoint();
    Run remote =
        mode == Mode.HYBRID
            ? run(job, "switchyard-hybrid", hybridConf(endpoint))
            : run(job, "switchyard", celebornConf(endpoint));
    server.assertAlive();
    long a2 = server.appendedBytes();
    long appended = a2 - a1;
    String line =
        String.format(
            "%s %-14s %-8s vanilla %6d ms %10d B out | switchyard %6d ms %10d B out (%d tasks), appended %10d B",
            LocalDateTime.now().withNano(0), job.name(), mode, vanilla.millis(), vanilla.bytesOut(),
            remote.millis(), remote.bytesOut(), remote.counters(), appended);
    System.out.println("[flink] " + line);
    Files.createDirectories(TIMINGS.getParent());
    Files.writeString(
        TIMINGS, line + "\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);

    assertEquals(0, a1 - a0, job.name() + ": the run on Flink's own shuffle stored bytes in switchyard");
    if (ordered) {
      TreeMap<Integer, List<String>> want = FlinkJobs.results(vanilla.runId());
      TreeMap<Integer, List<String>> got = FlinkJobs.results(remote.runId());
      assertEquals(want.keySet(), got.keySet(), job.name() + ": subtasks with output");
      for (Integer p : want.keySet()) {
        assertSameRecords(job.name() + " subtask " + p, want.get(p), got.get(p));
      }
    } else {
      assertSameRecords(
          job.name(), FlinkJobs.sortedRecords(vanilla.runId()), FlinkJobs.sortedRecords(remote.runId()));
    }
    assertTrue(remote.bytesOut() > 0, job.name() + ": Flink reported no bytes written into the shuffle");
    // numBytesOut is counted before the client's LZ4 compression (on by default), which these
    // inputs shrink by 1.1x (sort) to 3.6x (word count); switchyard stores what was pushed.
    assertTrue(
        appended > 0 && appended >= remote.bytesOut() / MAX_COMPRESSION,
        job.name() + ": switchyard stored " + appended + " bytes during the run, less than 1/"
            + MAX_COMPRESSION + " of the " + remote.bytesOut() + " (uncompressed) bytes Flink wrote"
            + " into the shuffle: the job did not (only) go through switchyard");
    if (mode == Mode.HYBRID) {
      // Flink 1.20 uses an external remote tier alone (no memory or disk tier), and its hybrid
      // buffers reach the tier uncompressed: every byte written, plus Celeborn's headers.
      assertTrue(
          appended >= remote.bytesOut(),
          job.name() + ": switchyard stored " + appended + " bytes, less than the "
              + remote.bytesOut() + " bytes Flink wrote into the hybrid shuffle: some went"
              + " through another tier");
    }
  }

  static void assertSameRecords(String what, List<String> want, List<String> got) {
    if (want.equals(got)) {
      return;
    }
    int i = 0;
    while (i < want.size() && i < got.size() && want.get(i).equals(got.get(i))) {
      i++;
    }
    Assertions.fail(
        what + ": output differs from Flink's own shuffle: " + want.size() + " vs " + got.size()
            + " records, first difference at " + i + ": "
            + (i < want.size() ? want.get(i) : "<end>") + " vs " + (i < got.size() ? got.get(i) : "<end>"));
  }

  /** Checks the vanilla run's output against what the generators imply (the job itself is right). */
  static void checkJob(FlinkJobs.Job job, String runId) {
    long n;
    switch (job.name()) {
      case "wordCount" -> {
        long words = 0;
        for (long l = 0; l < (long) FlinkJobs.WC_LINES * SCALE; l++) {
          words += FlinkJobs.words(l).length;
        }
        long counted = 0;
        for (String r : FlinkJobs.sortedRecords(runId)) {
          counted += Long.parseLong(r.substring(r.lastIndexOf(',') + 1, r.length() - 1));
        }
        assertEquals(words, counted, "wordCount: sum of counts");
      }
      case "joinAggregate" -> {
        Map<Long, Long> left = new HashMap<>();
        Map<Long, Long> right = new HashMap<>();
        for (long i = 0; i < (long) FlinkJobs.JOIN_LEFT * SCALE; i++) {
          left.merge(new FlinkJobs.JoinSide(FlinkJobs.JOIN_LEFT_KEYS, 0L).map(i).f0, 1L, Long::sum);
        }
        FlinkJobs.JoinSide r = new FlinkJobs.JoinSide(FlinkJobs.JOIN_RIGHT_KEYS, 0x7F4A7C15L);
        for (long i = 0; i < (long) FlinkJobs.JOIN_RIGHT * SCALE; i++) {
          right.merge(r.map(i).f0, 1L, Long::sum);
        }
        n = 0;
        for (Map.Entry<Long, Long> e : left.entrySet()) {
          n += e.getValue() * right.getOrDefault(e.getKey(), 0L);
        }
        long pairs = 0;
        for (String rec : FlinkJobs.sortedRecords(runId)) {
          String[] f = rec.substring(1, rec.length() - 1).split(",");
          pairs += Long.parseLong(f[1]);
        }
        assertEquals(n, pairs, "joinAggregate: number of joined pairs");
        assertTrue(n > 0);
      }
      case "sortByKey" -> {
        List<Long> keys = new ArrayList<>();
        TreeMap<Integer, List<String>> parts = FlinkJobs.results(runId);
        for (List<String> p : parts.values()) {
          for (String rec : p) {
            keys.add(Long.parseLong(rec.substring(1, rec.indexOf(','))));
          }
        }
        assertEquals((long) FlinkJobs.SORT_RECORDS * SCALE, keys.size(), "sortByKey: records");
        for (int i = 1; i < keys.size(); i++) {
          if (keys.get(i - 1) > keys.get(i)) {
            Assertions.fail("sortByKey: output not sorted at " + i + ": " + keys.get(i - 1) + " > " + keys.get(i));
          }
        }
        assertEquals(FlinkJobs.SORT_PARTITIONS, parts.size(), "sortByKey: subtasks with output");
      }
      default -> throw new IllegalArgumentException(job.name());
    }
  }
}
