package dev.switchyard.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
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
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;

/**
 * N {@code switchyard serve} processes on one machine, one host per loopback address: node {@code
 * i} (counted from 1) listens on {@code 127.0.0.(i+1)} with every role's default port (admin
 * 19990, Uniffle coordinator 19999, shuffle server 19997 and Netty 19996, Celeborn master 9097 and
 * worker 9100-9103), as it would on a host of its own. Each node has its own directory (config,
 * data, log) under one temp dir. The Java counterpart of {@code gateway/tests/common/cluster.rs}.
 *
 * <p>The nodes form a fleet when {@code extraToml} has a {@code [cluster]} table naming them.
 * {@link #stop} (SIGTERM), {@link #kill}
 * (SIGKILL) and {@link #restart} act on one node's process by its PID; {@link #close} kills every
 * node still running and removes the temp dir (kept with {@code -Dswitchyard.keepData=true}).
 * Logs go to {@code switchyard.logDir} (default {@code target/switchyard-logs}), one file per node,
 * every start appended. The fixed addresses allow one cluster at a time on a machine.
 */
public final class SwitchyardCluster implements AutoCloseable {

  static final Duration READY_TIMEOUT = Duration.ofSeconds(60);
  static final Duration STOP_TIMEOUT = Duration.ofSeconds(60);

  /** Every role's default port, with the config key that sets it. */
  static final Map<String, Integer> DEFAULT_PORTS = defaultPorts();

  private static Map<String, Integer> defaultPorts() {
    Map<String, Integer> m = new java.util.LinkedHashMap<>();
    m.put("admin.listen", 19990);
    m.put("cluster.listen", 19980);
    m.put("uniffle.coordinator_listen", 19999);
    m.put("uniffle.server_grpc_listen", 19997);
    m.put("uniffle.server_netty_listen", 19996);
    m.put("celeborn.master_listen", 9097);
    m.put("celeborn.worker_rpc_listen", 9100);
    m.put("celeborn.worker_push_listen", 9101);
    m.put("celeborn.worker_fetch_listen", 9102);
    m.put("celeborn.worker_replicate_listen", 9103);
    return java.util.Collections.unmodifiableMap(m);
  }

  private static final Pattern NODE_ID = Pattern.compile("\"node\"\\s*:\\s*\\{\\s*\"id\"\\s*:\\s*\"([^\"]+)\"");

  private final String name;
  private final Path binary;
  private final Path root;
  private final List<Node> nodes = new ArrayList<>();
  /** Addresses {@link #isolate} cut off, for {@link #killAll} to restore. */
  private final java.util.Set<String> isolated = java.util.concurrent.ConcurrentHashMap.newKeySet();
  private final Thread reaper;

  private static final class Node {
    final int index;
    final String host;
    final Path dir;
    final Path config;
    final Path log;
    Process process;
    int starts;

    Node(int index, String host, Path dir, Path config, Path log) {
      this.index = index;
      this.host = host;
      this.dir = dir;
      this.config = config;
      this.log = log;
    }
  }

  private SwitchyardCluster(String name, int n, String memoryCapacity, java.util.function.IntFunction<String> extraToml)
      throws IOException {
    if (n < 1 || n > 250) {
      throw new IllegalArgumentException("a cluster has 1 to 250 nodes, not " + n);
    }
    this.name = name;
    this.binary = SwitchyardProcess.locateBinary();
    this.root = Files.createTempDirectory("switchyard-cluster-" + name + "-");
    Path logDir = Paths.get(System.getProperty("switchyard.logDir", "target/switchyard-logs")).toAbsolutePath();
    Files.createDirectories(logDir);
    String stamp = java.time.LocalDateTime.now()
        .format(java.time.format.DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss-SSS"));
    for (int i = 1; i <= n; i++) {
      String host = "127.0.0." + (i + 1);
      Path dir = root.resolve("node" + i);
      Files.createDirectories(dir.resolve("data"));
      Path config = dir.resolve("switchyard.toml");
      Files.writeString(config, configText(host, dir.resolve("data"), memoryCapacity, extraToml.apply(i)), StandardCharsets.UTF_8);
      nodes.add(new Node(i, host, dir, config, logDir.resolve(name + "-node" + i + "-" + stamp + ".log")));
    }
    // If the JVM ends without close(), leave no server behind.
    reaper = new Thread(this::killAll, "switchyard-cluster-" + name + "-reaper");
    Runtime.getRuntime().addShutdownHook(reaper);
  }

  /** Starts {@code n} nodes with a 64 MiB memory budget each and waits until each is ready. */
  public static SwitchyardCluster start(String name, int n) throws IOException {
    return start(name, n, "64MiB", "");
  }

  /**
   * Starts {@code n} nodes, one after the other, and waits until each is ready ({@code GET
   * /readyz} answers 200). {@code extraToml}: whole tables appended to every node's config (not
   * {@code [node]}, {@code [storage.memory]} or {@code [storage.disks]}, which the cluster writes).
   * Throws, naming the address, if a default port on a node's address is taken.
   */
  public static SwitchyardCluster start(String name, int n, String memoryCapacity, String extraToml)
      throws IOException {
    return start(name, n, memoryCapacity, i -> extraToml);
  }

  /** As {@link #start(String, int, String, String)}, with each node's tables from {@code extraToml(i)}. */
  public static SwitchyardCluster start(
      String name, int n, String memoryCapacity, java.util.function.IntFunction<String> extraToml) throws IOException {
    SwitchyardCluster c = new SwitchyardCluster(name, n, memoryCapacity, extraToml);
    try {
      for (int i = 1; i <= n; i++) {
        c.launch(i);
      }
      return c;
    } catch (RuntimeException | IOException e) {
      c.close();
      throw e;
    }
  }

  static String configText(String host, Path data, String memoryCapacity, String extraToml) {
    return "[node]\n"
        + "host = \"" + host + "\"\n"
        + "[storage.memory]\n"
        + "capacity = \"" + SwitchyardProcess.tomlEscape(memoryCapacity) + "\"\n"
        + "[storage.disks]\n"
        + "dirs = [\"" + SwitchyardProcess.tomlEscape(data.toString()) + "\"]\n"
        // The host's free space must not matter.
        + "min_free = \"16MiB\"\n"
        + extraToml;
  }

  public int size() {
    return nodes.size();
  }

  private Node node(int i) {
    if (i < 1 || i > nodes.size()) {
      throw new IllegalArgumentException("no node " + i + " in a cluster of " + nodes.size() + " (nodes count from 1)");
    }
    return nodes.get(i - 1);
  }

  /** {@code 127.0.0.(i+1)} */
  public String host(int i) {
    return node(i).host;
  }

  public String adminUrl(int i) {
    return "http://" + host(i) + ":19990";
  }

  /** {@code host:19999}, for {@code spark.rss.coordinator.quorum}. */
  public String coordinatorQuorum(int i) {
    return host(i) + ":19999";
  }

  /** {@code host:9097}, for {@code spark.celeborn.master.endpoints}. */
  public String celebornMasterEndpoint(int i) {
    return host(i) + ":9097";
  }

  public Path dataDir(int i) {
    return node(i).dir.resolve("data");
  }

  public Path logFile(int i) {
    return node(i).log;
  }

  public boolean isAlive(int i) {
    Process p = node(i).process;
    return p != null && p.isAlive();
  }

  public long pid(int i) {
    Node n = node(i);
    if (n.process == null) {
      throw new IllegalStateException("node " + i + " is not running");
    }
    return n.process.pid();
  }

  /** {@code GET path} on node {@code i}'s admin server: the body; throws unless it answers 200. */
  public String adminGet(int i, String path) throws IOException, InterruptedException {
    HttpResponse<String> r = get(i, path);
    if (r.statusCode() != 200) {
      throw new IOException("GET " + adminUrl(i) + path + ": HTTP " + r.statusCode() + ": " + r.body());
    }
    return r.body();
  }

  private HttpResponse<String> get(int i, String path) throws IOException, InterruptedException {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    return http.send(
        HttpRequest.newBuilder(URI.create(adminUrl(i) + path)).timeout(Duration.ofSeconds(5)).GET().build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /** {@code POST path} on node {@code i}'s admin server with a bearer token: the status code. */
  public int adminPost(int i, String path, String token) throws IOException, InterruptedException {
    HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(adminUrl(i) + path))
        .timeout(Duration.ofSeconds(5))
        .POST(HttpRequest.BodyPublishers.noBody());
    if (token != null) {
      b.header("Authorization", "Bearer " + token);
    }
    return http.send(b.build(), HttpResponse.BodyHandlers.ofString()).statusCode();
  }

  /** Waits up to {@code d} for node {@code i} to exit on its own: its exit status, or -1. */
  public int waitExit(int i, Duration d) {
    Node n = running(i, "wait for");
    if (!waitFor(n.process, d)) {
      return -1;
    }
    int status = n.process.exitValue();
    System.out.printf("[cluster:%s] node %d exited by itself, exit status %d%n", name, i, status);
    n.process = null;
    return status;
  }

  /**
   * Cuts node {@code i} off without stopping it: iptables drops every packet to or from its
   * loopback address (needs root), so nothing reaches it and it reaches nobody, itself included.
   * {@link #rejoin} and {@link #close} remove the rules.
   */
  public void isolate(int i) {
    String host = host(i);
    iptables("-I", "INPUT", "-s", host, "-j", "DROP");
    iptables("-I", "INPUT", "-d", host, "-j", "DROP");
    isolated.add(host);
    System.out.printf("[cluster:%s] node %d on %s cut off (iptables DROP)%n", name, i, host);
  }

  /** Removes what {@link #isolate} added for node {@code i}. */
  public void rejoin(int i) {
    String host = host(i);
    if (isolated.remove(host)) {
      unblock(host);
      System.out.printf("[cluster:%s] node %d on %s reachable again%n", name, i, host);
    }
  }

  private static void unblock(String host) {
    iptables("-D", "INPUT", "-s", host, "-j", "DROP");
    iptables("-D", "INPUT", "-d", host, "-j", "DROP");
  }

  private static void iptables(String... args) {
    List<String> cmd = new ArrayList<>();
    cmd.add("iptables");
    cmd.addAll(List.of(args));
    try {
      Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0) {
        throw new IllegalStateException(String.join(" ", cmd) + " failed (root and the iptables package are needed): " + out);
      }
    } catch (IOException e) {
      throw new IllegalStateException("cannot run iptables (install Debian's iptables; tests run as root)", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** {@code /api/v1/status} of node {@code i}, as JSON text. */
  public String status(int i) {
    try {
      return adminGet(i, "/api/v1/status");
    } catch (IOException | InterruptedException e) {
      throw new AssertionError("node " + i + ": cannot read /api/v1/status\n" + logTail(i, 30), e);
    }
  }

  /** The node id that node {@code i} reports in {@code /api/v1/status}. */
  public String nodeId(int i) {
    String body = status(i);
    Matcher m = NODE_ID.matcher(body);
    if (!m.find()) {
      throw new AssertionError("no node.id in /api/v1/status of node " + i + ": " + body);
    }
    return m.group(1);
  }

  /** SIGTERM to node {@code i}; waits for it to exit and returns its exit status. */
  public int stop(int i) {
    Node n = running(i, "stop");
    n.process.destroy();
    if (!waitFor(n.process, STOP_TIMEOUT)) {
      throw new IllegalStateException(
          "node " + i + " still running " + STOP_TIMEOUT.toSeconds() + " s after SIGTERM\n" + logTail(i, 40));
    }
    int status = n.process.exitValue();
    System.out.printf("[cluster:%s] node %d stopped (SIGTERM), exit status %d%n", name, i, status);
    n.process = null;
    return status;
  }

  /** SIGKILL to node {@code i}; waits until it is gone and returns its exit status (137). */
  public int kill(int i) {
    Node n = running(i, "kill");
    n.process.destroyForcibly();
    if (!waitFor(n.process, STOP_TIMEOUT)) {
      throw new IllegalStateException("node " + i + " still running after SIGKILL");
    }
    int status = n.process.exitValue();
    System.out.printf("[cluster:%s] node %d killed (SIGKILL), exit status %d%n", name, i, status);
    n.process = null;
    return status;
  }

  /**
   * Starts node {@code i} again with the same config, data dir and addresses, and waits until it
   * is ready. A node still running is stopped first (SIGTERM).
   */
  public void restart(int i) throws IOException {
    if (isAlive(i)) {
      int status = stop(i);
      if (status != 0) {
        throw new IllegalStateException("node " + i + " exited with " + status + " on stop\n" + logTail(i, 40));
      }
    }
    launch(i);
  }

  private Node running(int i, String what) {
    Node n = node(i);
    if (n.process == null || !n.process.isAlive()) {
      throw new IllegalStateException("cannot " + what + " node " + i + ": not running");
    }
    return n;
  }

  private void launch(int i) throws IOException {
    Node n = node(i);
    checkPortsFree(n);
    n.starts++;
    String header = "#### cluster " + name + ": start " + n.starts + " of node " + i + " on " + n.host + "\n";
    Files.writeString(n.log, header, StandardCharsets.UTF_8,
        java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
    ProcessBuilder pb =
        new ProcessBuilder(binary.toString(), "serve", "--config", n.config.toString())
            .directory(n.dir.toFile())
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(n.log.toFile()));
    // The config file is what runs, not overrides from the developer's shell.
    pb.environment().keySet().removeIf(k -> k.startsWith("SWITCHYARD_") || k.equals("RUST_LOG"));
    String level = System.getProperty("switchyard.log", "");
    if (!level.isEmpty()) {
      pb.environment().put("SWITCHYARD_LOG", level);
    }
    long start = System.nanoTime();
    n.process = pb.start();
    System.out.printf("[cluster:%s] node %d on %s: pid %d, log %s%n", name, i, n.host, n.process.pid(), n.log);
    waitReady(n, start);
  }

  private void waitReady(Node n, long start) {
    long deadline = start + READY_TIMEOUT.toNanos();
    String last = "no answer yet";
    while (System.nanoTime() < deadline) {
      if (!n.process.isAlive()) {
        int status = n.process.exitValue();
        n.process = null;
        throw new IllegalStateException(
            "node " + n.index + " on " + n.host + " exited with status " + status + " before it was ready\n"
                + logTail(n.index, 40));
      }
      try {
        HttpResponse<String> r = get(n.index, "/readyz");
        if (r.statusCode() == 200) {
          System.out.printf("[cluster:%s] node %d ready after %d ms%n", name, n.index, (System.nanoTime() - start) / 1_000_000);
          return;
        }
        last = "HTTP " + r.statusCode() + ": " + r.body();
      } catch (IOException e) {
        last = e.toString();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted while waiting for node " + n.index, e);
      }
      sleep(100);
    }
    throw new IllegalStateException(
        "node " + n.index + " not ready within " + READY_TIMEOUT.toSeconds() + " s: GET " + adminUrl(n.index)
            + "/readyz last gave " + last + "\n" + logTail(n.index, 40));
  }

  /** Throws, naming the address and key, if a default port is taken on the node's address. */
  private static void checkPortsFree(Node n) throws IOException {
    InetAddress ip = InetAddress.getByName(n.host);
    for (Map.Entry<String, Integer> e : DEFAULT_PORTS.entrySet()) {
      try (ServerSocket s = new ServerSocket()) {
        s.setReuseAddress(true);
        s.bind(new InetSocketAddress(ip, e.getValue()));
      } catch (IOException taken) {
        throw new IllegalStateException(
            "cluster node " + n.index + " needs " + n.host + ":" + e.getValue() + " (" + e.getKey()
                + ") but cannot listen there: " + taken.getMessage() + ". Another server (a switchyard, Uniffle"
                + " or Celeborn of yours, or another test's cluster) holds that port on " + n.host
                + " or on all addresses; stop it first.");
      }
    }
  }

  /** Last {@code lines} lines of node {@code i}'s log, with a header naming the file. */
  public String logTail(int i, int lines) {
    Path log = node(i).log;
    try {
      List<String> all = Files.readAllLines(log, StandardCharsets.UTF_8);
      List<String> tail = all.subList(Math.max(0, all.size() - lines), all.size());
      return "---- last " + tail.size() + " lines of " + log + " ----\n" + String.join("\n", tail) + "\n---- end of log ----";
    } catch (IOException | UncheckedIOException e) {
      return "(could not read " + log + ": " + e + ")";
    }
  }

  /** The coordinators of all nodes, comma separated. */
  public String coordinatorQuorum() {
    return IntStream.rangeClosed(1, size()).mapToObj(this::coordinatorQuorum).collect(Collectors.joining(","));
  }

  private void killAll() {
    for (String host : List.copyOf(isolated)) {
      try {
        unblock(host);
      } catch (RuntimeException e) {
        System.err.println("could not remove the iptables rules for " + host + ": " + e.getMessage());
      }
      isolated.remove(host);
    }
    for (Node n : nodes) {
      if (n.process != null && n.process.isAlive()) {
        n.process.destroyForcibly();
        waitFor(n.process, Duration.ofSeconds(10));
      }
      n.process = null;
    }
  }

  /** SIGKILL to every node still running; removes the temp dir. */
  @Override
  public void close() {
    killAll();
    try {
      Runtime.getRuntime().removeShutdownHook(reaper);
    } catch (IllegalStateException e) {
      // the JVM is already shutting down
    }
    if (!Boolean.getBoolean("switchyard.keepData")) {
      try (Stream<Path> s = Files.walk(root)) {
        s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      } catch (IOException e) {
        System.err.println("could not delete " + root + ": " + e);
      }
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

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }
}
