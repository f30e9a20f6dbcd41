package dev.switchyard.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A {@code switchyard serve} child process on loopback ports for one test class: the Uniffle
 * roles always, the Celeborn master and worker too when started with {@link #startWithCeleborn}.
 *
 * <p>System properties: {@code switchyard.bin} (the binary; default
 * {@code ../target/debug/switchyard}), {@code switchyard.logDir} (where the server's
 * stdout+stderr go; default {@code target/switchyard-logs}), {@code switchyard.log} (passed as
 * {@code SWITCHYARD_LOG}, e.g. {@code debug}), {@code switchyard.keepData=true} (keep the temp
 * dir with config and data after close).
 */
public final class SwitchyardProcess implements AutoCloseable {

  static final Duration READY_TIMEOUT = Duration.ofSeconds(60);
  static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);

  private final String name;
  /** Celeborn's authentication on: set before launch by {@link #startWithCelebornAuth}. */
  private boolean celebornAuth;
  private final Path binary;
  private final Path workDir;
  private final Path configFile;
  private final Path logFile;
  private final int adminPort;
  private final int coordinatorPort;
  private final int grpcPort;
  private final int nettyPort;
  private final String memoryCapacity;
  private final boolean celeborn;
  private final String memoryExtra;
  private final String extraToml;
  /** Data directories before the node's own {@code data} dir, and lines inside {@code [storage.disks]}. */
  private List<Path> firstDirs = List.of();
  private String disksExtra = "";
  /** Lines inside {@code [admin]} and {@code [uniffle]}. */
  private String adminExtra = "";
  private String uniffleExtra = "";
  private final int celebornMasterPort;
  private final int celebornRpcPort;
  private final int celebornPushPort;
  private final int celebornFetchPort;
  private final int celebornReplicatePort;
  private Process process;
  private Thread shutdownHook;
  /** A server this JVM did not start ({@link #external}): no process, no temp dir. */
  private final boolean external;

  private SwitchyardProcess(
      String name, String memoryCapacity, boolean celeborn, String memoryExtra, String extraToml)
      throws IOException {
    this.name = name;
    this.memoryCapacity = memoryCapacity;
    this.celeborn = celeborn;
    this.memoryExtra = memoryExtra;
    this.extraToml = extraToml;
    this.binary = locateBinary();
    int[] ports = freeLoopbackPorts(9);
    this.adminPort = ports[0];
    this.coordinatorPort = ports[1];
    this.grpcPort = ports[2];
    this.nettyPort = ports[3];
    this.celebornMasterPort = ports[4];
    this.celebornRpcPort = ports[5];
    this.celebornPushPort = ports[6];
    this.celebornFetchPort = ports[7];
    this.celebornReplicatePort = ports[8];
    this.workDir = Files.createTempDirectory("switchyard-it-" + name + "-");
    this.configFile = workDir.resolve("switchyard.toml");
    Path logDir = Paths.get(System.getProperty("switchyard.logDir", "target/switchyard-logs"));
    Files.createDirectories(logDir);
    String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss-SSS"));
    this.logFile = logDir.resolve(name + "-" + stamp + ".log").toAbsolutePath();
    this.external = false;
  }

  /** A server already running on 127.0.0.1 at the built-in default ports, both protocols on. */
  private SwitchyardProcess(String name, Path logFile) {
    this.name = name;
    this.memoryCapacity = "(external)";
    this.celeborn = true;
    this.memoryExtra = "";
    this.extraToml = "";
    this.binary = null;
    this.workDir = null;
    this.configFile = null;
    this.logFile = logFile;
    this.adminPort = 19990;
    this.coordinatorPort = 19999;
    this.grpcPort = 19997;
    this.nettyPort = 19996;
    this.celebornMasterPort = 9097;
    this.celebornRpcPort = 9100;
    this.celebornPushPort = 9101;
    this.celebornFetchPort = 9102;
    this.celebornReplicatePort = 9103;
    this.external = true;
  }

  /**
   * A server started outside this JVM (the container of integration/run-container.sh) that
   * listens on 127.0.0.1 at the default ports with Uniffle and Celeborn on; {@code logFile} is
   * where its log is copied, for failure messages. {@link #close} leaves it running.
   */
  public static SwitchyardProcess external(String name, Path logFile) {
    return new SwitchyardProcess(name, logFile);
  }

  /**
   * Writes the config, starts {@code switchyard serve --config <file>} and waits for
   * {@code /readyz}.
   *
   * @param name label for the log file and temp dir
   * @param memoryCapacity {@code storage.memory.capacity}, e.g. {@code "256MiB"}
   */
  public static SwitchyardProcess start(String name, String memoryCapacity) throws IOException {
    return start(name, memoryCapacity, false);
  }

  /**
   * As {@link #start(String, String)}, with the Celeborn master and worker enabled as well (one
   * process serving both protocols); clients use {@link #celebornMasterEndpoint()}.
   */
  public static SwitchyardProcess startWithCeleborn(String name, String memoryCapacity) throws IOException {
    return start(name, memoryCapacity, true);
  }

  private static SwitchyardProcess start(String name, String memoryCapacity, boolean celeborn)
      throws IOException {
    return start(name, memoryCapacity, celeborn, "", "");
  }

  /**
   * As {@link #start(String, String)} with more settings: {@code memoryExtra} are TOML lines
   * inside {@code [storage.memory]} (e.g. {@code single_buffer_threshold = "16MiB"}), {@code
   * extraToml} whole tables appended after {@code [storage.disks]} (e.g. {@code [storage.cold]},
   * {@code [storage.apps]}). Each ends with a newline or is empty.
   */
  public static SwitchyardProcess start(
      String name, String memoryCapacity, boolean celeborn, String memoryExtra, String extraToml)
      throws IOException {
    SwitchyardProcess p = new SwitchyardProcess(name, memoryCapacity, celeborn, memoryExtra, extraToml);
    return p.launched();
  }

  /**
   * As {@link #start(String, String)} with {@code firstDirs} listed before the node's own data
   * directory in {@code storage.disks.dirs}, and {@code disksExtra} lines inside {@code
   * [storage.disks]} (e.g. {@code io_timeout = "2s"}).
   */
  public static SwitchyardProcess startWithDisks(
      String name, String memoryCapacity, List<Path> firstDirs, String disksExtra) throws IOException {
    SwitchyardProcess p = new SwitchyardProcess(name, memoryCapacity, false, "", "");
    p.firstDirs = List.copyOf(firstDirs);
    p.disksExtra = disksExtra;
    return p.launched();
  }

  /**
   * As {@link #start(String, String)} (Uniffle only) with {@code adminExtra} lines inside {@code
   * [admin]} (e.g. {@code token = "t"}), {@code uniffleExtra} lines inside {@code [uniffle]} and
   * {@code extraToml} whole tables appended (e.g. {@code [cluster]}). Each ends with a newline or
   * is empty.
   */
  public static SwitchyardProcess startWithSections(
      String name, String memoryCapacity, String adminExtra, String uniffleExtra, String extraToml)
      throws IOException {
    SwitchyardProcess p = new SwitchyardProcess(name, memoryCapacity, false, "", extraToml);
    p.adminExtra = adminExtra;
    p.uniffleExtra = uniffleExtra;
    return p.launched();
  }

  /**
   * As {@link #startWithCeleborn}, with Celeborn's authentication on ({@code celeborn.auth_enabled}):
   * clients must run with {@code spark.celeborn.auth.enabled=true}.
   */
  public static SwitchyardProcess startWithCelebornAuth(String name, String memoryCapacity)
      throws IOException {
    return startWithCelebornAuth(name, memoryCapacity, "");
  }

  /** As {@link #startWithCelebornAuth(String, String)}, with whole TOML tables appended. */
  public static SwitchyardProcess startWithCelebornAuth(
      String name, String memoryCapacity, String extraToml) throws IOException {
    SwitchyardProcess p = new SwitchyardProcess(name, memoryCapacity, true, "", extraToml);
    p.celebornAuth = true;
    return p.launched();
  }

  /** Launches this process; a failed launch closes it (its child and temp dir) before throwing. */
  private SwitchyardProcess launched() throws IOException {
    try {
      launch();
      return this;
    } catch (RuntimeException | IOException e) {
      close();
      throw e;
    }
  }

  static Path locateBinary() {
    String prop = System.getProperty("switchyard.bin", "../target/debug/switchyard");
    Path bin = Paths.get(prop).toAbsolutePath().normalize();
    if (!Files.isRegularFile(bin) || !Files.isExecutable(bin)) {
      throw new IllegalStateException(
          "switchyard binary not found or not executable at "
              + bin
              + " (from -Dswitchyard.bin="
              + prop
              + "). Build it first (`cargo build -p switchyard` in the repository root) or pass"
              + " -Dswitchyard.bin=/path/to/switchyard."
              + " To run only Spark's own shuffle side, pass -Dswitchyard.vanillaOnly=true.");
    }
    return bin;
  }

  String configText() {
    Path dataDir = workDir.resolve("data");
    return "[admin]\n"
        + "listen = \"127.0.0.1:" + adminPort + "\"\n"
        + adminExtra
        + "[uniffle]\n"
        + "coordinator_listen = \"127.0.0.1:" + coordinatorPort + "\"\n"
        + "server_grpc_listen = \"127.0.0.1:" + grpcPort + "\"\n"
        + "server_netty_listen = \"127.0.0.1:" + nettyPort + "\"\n"
        + "advertised_host = \"127.0.0.1\"\n"
        + uniffleExtra
        + uniffleConf()
        + (celeborn ? celebornSection() : "[celeborn]\nenabled = false\n")
        + "[storage.memory]\n"
        + "capacity = \"" + tomlEscape(memoryCapacity) + "\"\n"
        + memoryExtra
        + "[storage.disks]\n"
        + "dirs = [" + firstDirs.stream().map(d -> "\"" + tomlEscape(d.toString()) + "\", ").collect(java.util.stream.Collectors.joining())
        + "\"" + tomlEscape(dataDir.toString()) + "\"]\n"
        + disksExtra
        // CI disks may have less free than the 2 GiB default reserve; a truly
        // full one shows up as ENOSPC.
        + "min_free = \"64MiB\"\n"
        + extraToml;
  }

  /**
   * Extra lines for {@code [uniffle]} from the system property {@code switchyard.uniffle.conf}
   * (lines separated by {@code ;}), e.g. {@code report_durability = "background"} for
   * integration/bench-spark.sh's BENCH_UNIFFLE_CONF.
   */
  static String uniffleConf() {
    String conf = System.getProperty("switchyard.uniffle.conf", "").trim();
    return conf.isEmpty() ? "" : conf.replace(';', '\n') + "\n";
  }

  /**
   * The Celeborn roles on their own free ports. (Without Celeborn the config says {@code
   * enabled = false}: the server's default is on, at the fixed ports 9097 and 9100-9103.)
   */
  private String celebornSection() {
    return "[celeborn]\n"
        + "enabled = true\n"
        + "master_listen = \"127.0.0.1:" + celebornMasterPort + "\"\n"
        + "worker_rpc_listen = \"127.0.0.1:" + celebornRpcPort + "\"\n"
        + "worker_push_listen = \"127.0.0.1:" + celebornPushPort + "\"\n"
        + "worker_fetch_listen = \"127.0.0.1:" + celebornFetchPort + "\"\n"
        + "worker_replicate_listen = \"127.0.0.1:" + celebornReplicatePort + "\"\n"
        + "advertised_host = \"127.0.0.1\"\n"
        + (celebornAuth ? "auth_enabled = true\n" : "");
  }

  static String tomlEscape(String s) {
    return s.replace("\\", "\\\\").replace("\"", "\\\"");
  }

  private void launch() throws IOException {
    Files.createDirectories(workDir.resolve("data"));
    Files.writeString(configFile, configText(), StandardCharsets.UTF_8);
    ProcessBuilder pb =
        new ProcessBuilder(binary.toString(), "serve", "--config", configFile.toString())
            .directory(workDir.toFile())
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
    Map<String, String> env = pb.environment();
    // Environment variables override the config file (docs/configuration.md): drop any that
    // leaked in from the developer's shell so that the file above is what runs.
    env.keySet().removeIf(k -> k.startsWith("SWITCHYARD_") || k.equals("RUST_LOG"));
    String level = System.getProperty("switchyard.log", "");
    if (!level.isEmpty()) {
      env.put("SWITCHYARD_LOG", level);
    }
    env.put("RUST_BACKTRACE", "1");
    Files.writeString(
        logFile,
        "# " + String.join(" ", pb.command()) + "\n# config:\n" + configText().replaceAll("(?m)^", "#   ") + "\n",
        StandardCharsets.UTF_8);
    process = pb.start();
    // If the test JVM ends without close() (crash, surefire timeout), do not leave the server behind.
    Process started = process;
    shutdownHook = new Thread(() -> started.destroyForcibly(), "switchyard-" + name + "-reaper");
    Runtime.getRuntime().addShutdownHook(shutdownHook);
    System.out.printf(
        "[switchyard:%s] pid %d, coordinator %s, grpc %d, netty %d, %sadmin %d, memory %s, log %s%n",
        name, process.pid(), coordinatorQuorum(), grpcPort, nettyPort,
        celeborn
            ? String.format("celeborn master %d worker rpc/push/fetch/replicate %d/%d/%d/%d, ",
                celebornMasterPort, celebornRpcPort, celebornPushPort, celebornFetchPort, celebornReplicatePort)
            : "",
        adminPort, memoryCapacity, logFile);
    waitReady();
  }

  private void waitReady() {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    HttpRequest req =
        HttpRequest.newBuilder(URI.create(adminUrl() + "/readyz")).timeout(Duration.ofSeconds(2)).GET().build();
    long start = System.nanoTime();
    long deadline = start + READY_TIMEOUT.toNanos();
    String last = "no answer yet";
    while (System.nanoTime() < deadline) {
      if (!process.isAlive()) {
        throw new IllegalStateException(
            "switchyard exited with status " + process.exitValue() + " before it was ready"
                + " (config " + configFile + ")\n" + logTail(60));
      }
      try {
        HttpResponse<String> resp = http.send(req, HttpResponse.BodyHandlers.ofString());
        if (resp.statusCode() == 200) {
          System.out.printf(
              "[switchyard:%s] ready after %d ms%n", name, (System.nanoTime() - start) / 1_000_000);
          return;
        }
        last = "HTTP " + resp.statusCode() + ": " + resp.body();
      } catch (IOException e) {
        last = e.toString();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted while waiting for switchyard", e);
      }
      sleep(200);
    }
    String tail = logTail(60);
    System.err.println(tail);
    throw new IllegalStateException(
        "switchyard not ready within " + READY_TIMEOUT.toSeconds() + " s: GET " + adminUrl()
            + "/readyz last gave " + last + "\n" + tail);
  }

  /** Throws, with the log tail, if the server died. Call after a job to blame the right side. */
  public void assertAlive() {
    if (external && !isAlive()) {
      throw new IllegalStateException("switchyard at " + adminUrl() + " does not answer /healthz\n" + logTail(80));
    }
    if (process != null && !process.isAlive()) {
      throw new IllegalStateException(
          "switchyard died (exit status " + process.exitValue() + ")\n" + logTail(80));
    }
  }

  /** The server's process id (e.g. for SIGSTOP in a hung-server test). */
  public long pid() {
    return process.pid();
  }

  public boolean isAlive() {
    if (external) {
      try {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        return http.send(HttpRequest.newBuilder(URI.create(adminUrl() + "/healthz")).timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.discarding()).statusCode() == 200;
      } catch (IOException | InterruptedException e) {
        return false;
      }
    }
    return process != null && process.isAlive();
  }

  /** {@code host:port} for {@code spark.rss.coordinator.quorum}. */
  public String coordinatorQuorum() {
    return "127.0.0.1:" + coordinatorPort;
  }

  /** {@code host:port} for {@code spark.celeborn.master.endpoints}. */
  public String celebornMasterEndpoint() {
    if (!celeborn) {
      throw new IllegalStateException("switchyard:" + name + " was started without Celeborn (use startWithCeleborn)");
    }
    return "127.0.0.1:" + celebornMasterPort;
  }

  public boolean celebornEnabled() {
    return celeborn;
  }

  public String adminUrl() {
    return "http://127.0.0.1:" + adminPort;
  }

  public int grpcPort() {
    return grpcPort;
  }

  public int nettyPort() {
    return nettyPort;
  }

  public Path logFile() {
    return logFile;
  }

  public Path dataDir() {
    return workDir.resolve("data");
  }

  /**
   * The sum of the samples of {@code metric} in a {@code /metrics} text whose labels contain
   * {@code label} (e.g. {@code result="digest"}); 0 when there are none.
   */
  public static double metricSum(String metricsText, String metric, String label) {
    double sum = 0;
    for (String line : metricsText.split("\n")) {
      if (line.startsWith(metric + "{") && line.contains(label)) {
        sum += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    return sum;
  }

  /** Bytes of blocks the store has accepted since it started, from {@code /api/v1/status}. */
  public long appendedBytes() {
    try {
      String body = adminGet("/api/v1/status");
      java.util.regex.Matcher m =
          java.util.regex.Pattern.compile("\"appended_bytes\"\\s*:\\s*(\\d+)").matcher(body);
      if (!m.find()) {
        throw new AssertionError("no appended_bytes in /api/v1/status: " + body);
      }
      return Long.parseLong(m.group(1));
    } catch (IOException | InterruptedException e) {
      throw new AssertionError("cannot read /api/v1/status", e);
    }
  }

  /** Bytes per tier ({@code storage.tiers} of {@code /api/v1/status}). */
  public record Tiers(long memory, long disk, long cold) {}

  /** The store's bytes per tier now, from {@code /api/v1/status}. */
  public Tiers tiers() {
    try {
      String body = adminGet("/api/v1/status");
      java.util.regex.Matcher m =
          java.util.regex.Pattern.compile(
                  "\"tiers\"\\s*:\\s*\\{\\s*\"memory\"\\s*:\\s*(\\d+)\\s*,\\s*\"disk\"\\s*:\\s*(\\d+)\\s*,"
                      + "\\s*\"cold\"\\s*:\\s*(\\d+)")
              .matcher(body);
      if (!m.find()) {
        throw new AssertionError("no storage.tiers in /api/v1/status: " + body);
      }
      return new Tiers(Long.parseLong(m.group(1)), Long.parseLong(m.group(2)), Long.parseLong(m.group(3)));
    } catch (IOException | InterruptedException e) {
      throw new AssertionError("cannot read /api/v1/status", e);
    }
  }

  /** GET on the admin server (e.g. {@code /metrics}); for diagnostics. */
  public String adminGet(String path) throws IOException, InterruptedException {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    return http.send(
            HttpRequest.newBuilder(URI.create(adminUrl() + path)).timeout(Duration.ofSeconds(5)).build(),
            HttpResponse.BodyHandlers.ofString())
        .body();
  }

  /** Last {@code lines} lines of the server log, with a header naming the file. */
  public String logTail(int lines) {
    try {
      List<String> all = Files.readAllLines(logFile, StandardCharsets.UTF_8);
      List<String> tail = all.subList(Math.max(0, all.size() - lines), all.size());
      return "---- last " + tail.size() + " lines of " + logFile + " ----\n"
          + String.join("\n", tail) + "\n---- end of log ----";
    } catch (IOException | UncheckedIOException e) {
      return "(could not read " + logFile + ": " + e + ")";
    }
  }

  /** SIGTERM, up to 30 s for a clean exit, then SIGKILL; removes the temp dir. */
  @Override
  public void close() {
    if (process != null && process.isAlive()) {
      long start = System.nanoTime();
      process.destroy();
      boolean exited = waitFor(process, STOP_TIMEOUT);
      if (!exited) {
        System.err.printf(
            "[switchyard:%s] still running %d s after SIGTERM, killing it%n", name, STOP_TIMEOUT.toSeconds());
        process.destroyForcibly();
        waitFor(process, Duration.ofSeconds(10));
      } else {
        System.out.printf(
            "[switchyard:%s] stopped in %d ms, exit status %d%n",
            name, (System.nanoTime() - start) / 1_000_000, process.exitValue());
      }
    }
    if (shutdownHook != null) {
      try {
        Runtime.getRuntime().removeShutdownHook(shutdownHook);
      } catch (IllegalStateException e) {
        // the JVM is already shutting down
      }
      shutdownHook = null;
    }
    if (!Boolean.getBoolean("switchyard.keepData")) {
      deleteRecursively(workDir);
    }
  }

  private static boolean waitFor(Process p, Duration d) {
    try {
      return p.waitFor(d.toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return !p.isAlive();
    }
  }

  private static void deleteRecursively(Path dir) {
    if (dir == null || !Files.exists(dir)) {
      return;
    }
    try (Stream<Path> s = Files.walk(dir)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      System.err.println("could not delete " + dir + ": " + e);
    }
  }

  /** Distinct ports that were free on 127.0.0.1 a moment ago (all held open until chosen). */
  static int[] freeLoopbackPorts(int n) throws IOException {
    List<ServerSocket> sockets = new ArrayList<>();
    try {
      int[] ports = new int[n];
      for (int i = 0; i < n; i++) {
        ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
        s.setReuseAddress(true);
        sockets.add(s);
        ports[i] = s.getLocalPort();
      }
      return ports;
    } finally {
      for (ServerSocket s : sockets) {
        s.close();
      }
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }
}
