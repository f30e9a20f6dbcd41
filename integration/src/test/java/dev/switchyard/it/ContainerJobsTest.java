package dev.switchyard.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.Timeout;

/**
 * The container image against real Spark jobs: integration/run-container.sh builds
 * localhost/switchyard:dev, runs it with podman (host network, default ports, SWITCHYARD_HOST
 * 127.0.0.1, a data volume) and runs this class (tag {@code container}) against it. Each stock
 * client runs a job that must equal Spark's own shuffle; /healthz and /metrics answer with both
 * protocols' traffic; and for each client a shuffle outlives {@code podman stop} (SIGTERM, exit
 * status 0, the flush logged) and {@code podman start} on the same volume: the second job reads it
 * without rerunning its map stage.
 *
 * <p>System properties: {@code switchyard.container.name} (the container, default {@code
 * switchyard-ci}), {@code switchyard.restart.records} (600000).
 */
@Tag("container")
@Timeout(value = 5, unit = TimeUnit.MINUTES)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ContainerJobsTest {

  static final String CONTAINER = System.getProperty("switchyard.container.name", "switchyard-ci");
  static final Path LOG = Paths.get("target", "switchyard-logs", "container-" + CONTAINER + ".log").toAbsolutePath();
  static SwitchyardProcess server;

  @BeforeAll
  static void attach() throws Exception {
    server = SwitchyardProcess.external("container", LOG);
    if (!server.isAlive()) {
      throw new IllegalStateException("no switchyard at " + server.adminUrl() + " (container " + CONTAINER
          + "): run integration/run-container.sh, which starts it");
    }
    System.out.println("[suite] ContainerJobsTest: container " + CONTAINER + ", Uniffle " + SparkHarness.clientLabel()
        + " " + SparkHarness.clientType() + ", Celeborn " + SparkHarness.celebornLabel());
  }

  /** The container's whole log (every start), for the failure messages and the CI artifacts. */
  @AfterEach
  void saveLog() throws Exception {
    Files.createDirectories(LOG.getParent());
    Files.writeString(LOG, podman("logs", CONTAINER), StandardCharsets.UTF_8);
  }

  @Test
  @Order(1)
  void uniffleJob() {
    SparkHarness.compareWithVanilla("ctr-uniffle", server, SparkHarness.uniffle(), Jobs::sqlJoinAggregate,
        (e, a) -> Compare.sameList("sqlJoinAggregate", e, a));
  }

  @Test
  @Order(2)
  void celebornJob() {
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.compareWithVanilla("ctr-celeborn/" + writer, server, SparkHarness.celeborn(writer),
        Jobs::sqlJoinAggregate, (e, a) -> Compare.sameList("sqlJoinAggregate", e, a));
  }

  /** /healthz answers and /metrics counts the traffic of both jobs above (pushed and fetched), per protocol. */
  @Test
  @Order(3)
  void healthAndMetrics() throws Exception {
    if (!server.isAlive()) {
      throw new AssertionError("GET /healthz did not answer 200");
    }
    String metrics = server.adminGet("/metrics");
    for (String metric : List.of("switchyard_pushed_bytes_total", "switchyard_fetched_bytes_total")) {
      for (String protocol : List.of("uniffle", "celeborn")) {
        if (SwitchyardProcess.metricSum(metrics, metric, "protocol=\"" + protocol + "\"") <= 0) {
          throw new AssertionError("/metrics: no " + metric + " for " + protocol + ":\n" + metrics);
        }
      }
    }
  }

  @Test
  @Order(4)
  void celebornShuffleOutlivesPodmanStop() throws Exception {
    restartBetweenJobs("ctr-restart-celeborn", c -> SparkHarness.withCeleborn(c, server.celebornMasterEndpoint(),
        SparkHarness.celebornWriters().get(0)));
  }

  @Test
  @Order(5)
  void uniffleShuffleOutlivesPodmanStop() throws Exception {
    restartBetweenJobs("ctr-restart-uniffle", c -> SparkHarness.withUniffle(c, server.coordinatorQuorum(),
        SparkHarness.clientType()));
  }

  /**
   * A Spark application computes a shuffle and reads it twice; between the two jobs the container
   * is stopped and started again. The second job must equal Spark's own shuffle, and the restarted
   * node must take no push (had a read failed, Spark would have rerun the map stage).
   */
  static void restartBetweenJobs(String name, java.util.function.UnaryOperator<SparkConf> client) throws Exception {
    long records = Long.getLong("switchyard.restart.records", 600_000L);
    List<Jobs.PartitionDigest> vanilla = SparkHarness.runApp(SparkHarness.baseConf("vanilla-" + name, "local[2]"),
        spark -> Jobs.reusedShuffle(spark, records, () -> {})).value();
    SparkConf conf = client.apply(SparkHarness.baseConf(name, "local[2]"));
    List<Jobs.PartitionDigest> run = SparkHarness.runApp(conf, spark ->
        Jobs.reusedShuffle(spark, records, () -> {
          try {
            restartContainer(name);
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        })).value();
    Compare.sameList(name + ": second job after the restart", vanilla, run);
    long appended = server.appendedBytes();
    if (appended != 0) {
      throw new AssertionError(name + ": the restarted node took " + appended + " bytes of new pushes (the map"
          + " stage ran again): " + server.adminGet("/api/v1/status"));
    }
  }

  /**
   * {@code podman stop -t 120} (SIGTERM through the container's init), then {@code podman start}:
   * exit status 0, the partitions recorded in the log, the same node id after the start and its
   * partitions recovered from the volume.
   */
  static void restartContainer(String name) throws Exception {
    String before = field(server.adminGet("/api/v1/status"), "\"node\"\\s*:\\s*\\{\\s*\"id\"\\s*:\\s*\"([^\"]+)\"");
    int stopsBefore = count(podman("logs", CONTAINER), "switchyard stopped");
    long started = System.nanoTime();
    podman("stop", "-t", "120", CONTAINER);
    long stopped = System.nanoTime();
    String exit = podman("inspect", "--format", "{{.State.ExitCode}}", CONTAINER).trim();
    if (!exit.equals("0")) {
      throw new AssertionError(name + ": the container exited with status " + exit + " on SIGTERM");
    }
    String log = podman("logs", CONTAINER);
    if (count(log, "switchyard stopped") != stopsBefore + 1) {
      throw new AssertionError(name + ": no new 'switchyard stopped' in the log:\n" + tail(log));
    }
    String recorded = lastLine(log, "partitions recorded for the restart");
    if (Long.parseLong(field(recorded, "\"partitions\"\\s*:\\s*(\\d+)")) == 0) {
      throw new AssertionError(name + ": the stop recorded no partition: " + recorded);
    }
    podman("start", CONTAINER);
    awaitReady();
    String status = server.adminGet("/api/v1/status");
    if (!before.equals(field(status, "\"node\"\\s*:\\s*\\{\\s*\"id\"\\s*:\\s*\"([^\"]+)\""))) {
      throw new AssertionError(name + ": the node came back with another id than " + before + ": " + status);
    }
    long recovered = Long.parseLong(field(status, "\"recovery\":\\{[^}]*\"partitions\":(\\d+)"));
    if (recovered == 0) {
      throw new AssertionError(name + ": nothing recovered from the volume: " + status);
    }
    String line = String.format("%s: podman stop in %d ms (%s), ready again %d ms later with %d partitions recovered",
        name, (stopped - started) / 1_000_000, recorded.trim(), (System.nanoTime() - stopped) / 1_000_000, recovered);
    System.out.println("[container] " + line);
    SparkHarness.appendTiming(line);
    // The Uniffle client's gRPC channels saw the node go away and reconnect with a backoff (1 s,
    // then 1.6 s, ...), failing calls at once meanwhile (no wait-for-ready): a node back within
    // 2 s, as here, can be called too early. Let them reconnect, as a slower restart would.
    Thread.sleep(5000);
  }

  static void awaitReady() throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
    String last = "no answer";
    while (System.nanoTime() < deadline) {
      try {
        last = server.adminGet("/readyz");
        if (last.equals("ready") && server.isAlive()) {
          return;
        }
      } catch (IOException e) {
        last = e.toString();
      }
      Thread.sleep(200);
    }
    throw new AssertionError("container " + CONTAINER + " not ready within 60 s: " + last + "\n"
        + tail(podman("logs", CONTAINER)));
  }

  /** Runs podman with the arguments; its standard output, or an AssertionError with both outputs. */
  static String podman(String... args) throws IOException, InterruptedException {
    List<String> cmd = new java.util.ArrayList<>(List.of("podman"));
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (!p.waitFor(180, TimeUnit.SECONDS) || p.exitValue() != 0) {
      p.destroyForcibly();
      throw new AssertionError(String.join(" ", cmd) + " failed:\n" + tail(out));
    }
    return out;
  }

  static String field(String text, String regex) {
    Matcher m = Pattern.compile(regex).matcher(text);
    if (!m.find()) {
      throw new AssertionError("no /" + regex + "/ in: " + tail(text));
    }
    return m.group(1);
  }

  static int count(String text, String needle) {
    return (int) text.lines().filter(l -> l.contains(needle)).count();
  }

  static String lastLine(String text, String needle) {
    return text.lines().filter(l -> l.contains(needle)).reduce((a, b) -> b)
        .orElseThrow(() -> new AssertionError("no '" + needle + "' in the log:\n" + tail(text)));
  }

  static String tail(String text) {
    List<String> lines = text.lines().toList();
    return String.join("\n", lines.subList(Math.max(0, lines.size() - 60), lines.size()));
  }
}
