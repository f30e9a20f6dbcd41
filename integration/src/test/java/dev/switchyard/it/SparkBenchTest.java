package dev.switchyard.it;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Spark-level benchmark (tag {@code bench}; {@code integration/bench-spark.sh} runs it
 * against the release binary): each workload of {@link SparkBench} through Spark's own shuffle
 * and through each stock client against a fresh {@code switchyard} (1 GiB memory, every other
 * setting default), interleaved round by round so that the machine's drift hits every client
 * alike, each run in a fresh JVM. Prints per client the best and median wall time of the
 * rounds, the map and reduce stages (groupby), the ratio of the best to Spark's own shuffle,
 * the gateway's CPU seconds per GiB shuffled and its peak RSS, and for the SQL workload the
 * requests the gateway answered per shuffle by kind with their mean time. Every run's result
 * checksum must equal vanilla's, so a fast wrong shuffle fails the benchmark.
 *
 * <p>Properties: {@code switchyard.bench.rounds} (3), {@code switchyard.bench.workloads}
 * ({@code groupby,sql}), {@code switchyard.bench.clients} ({@code
 * vanilla,uniffle-GRPC,celeborn-HASH}), {@code switchyard.bench.gib} (1), {@code
 * switchyard.bench.sqlRows} (1.5M), {@code switchyard.bench.memory} ({@code 1GiB}). The clients {@code
 * jvm-uniffle-GRPC}, {@code jvm-uniffle-GRPC_NETTY} and {@code jvm-celeborn-HASH} run the same job
 * against the upstream JVM servers ({@link JvmServers}), given the same memory.
 */
@Tag("bench")
@Timeout(value = 180, unit = TimeUnit.MINUTES)
class SparkBenchTest {

  /** One run's figures. */
  record Run(String client, Map<String, String> values, double gatewayCpuSeconds, long gatewayPeakRss,
      Map<String, double[]> requests) {
    long wall() {
      return Long.parseLong(values.get("wall_ms"));
    }

    long get(String key) {
      return Long.parseLong(values.getOrDefault(key, "-1"));
    }
  }

  @Test
  void benchmark() throws Exception {
    int rounds = Integer.getInteger("switchyard.bench.rounds", 3);
    List<String> workloads = Arrays.asList(System.getProperty("switchyard.bench.workloads", "groupby,sql").split(","));
    List<String> clients = Arrays.asList(
        System.getProperty("switchyard.bench.clients", "vanilla,uniffle-GRPC,celeborn-HASH").split(","));
    String memory = System.getProperty("switchyard.bench.memory", "1GiB");
    Path dir = Paths.get("target", "bench",
        LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"))).toAbsolutePath();
    Files.createDirectories(dir);
    StringBuilder report = new StringBuilder();
    for (String workload : workloads) {
      if (workload.equals("sql")) {
        child("vanilla", "-", "sql-prepare", dir, "prepare");
      }
      Map<String, List<Run>> runs = new LinkedHashMap<>();
      for (int round = 1; round <= rounds; round++) {
        for (String client : clients) {
          Run r = run(client, workload, memory, dir, round);
          runs.computeIfAbsent(client, c -> new ArrayList<>()).add(r);
          System.out.printf("[bench] %s %s round %d: %d ms%s%n", workload, client, round, r.wall(),
              r.gatewayPeakRss > 0 ? String.format(", server %.2f CPU-s, peak RSS %s", r.gatewayCpuSeconds,
                  SparkHarness.mb(r.gatewayPeakRss)) : "");
        }
      }
      String checksum = runs.get(clients.get(0)).get(0).values.get("checksum");
      for (List<Run> rs : runs.values()) {
        for (Run r : rs) {
          if (!r.values.get("checksum").equals(checksum)) {
            Map<String, String> base = runs.get(clients.get(0)).get(0).values;
            List<String> differ = new ArrayList<>();
            for (Map.Entry<String, String> v : r.values.entrySet()) {
              if (v.getKey().startsWith("sum.") && !v.getValue().equals(base.get(v.getKey()))) {
                differ.add(v.getKey().substring(4));
              }
            }
            throw new AssertionError(workload + ": " + r.client + " gave checksum " + r.values.get("checksum")
                + ", " + clients.get(0) + " " + checksum + (differ.isEmpty() ? "" : "; queries that differ: " + differ));
          }
        }
      }
      report.append(table(workload, runs, clients.get(0)));
    }
    System.out.println(report);
    Files.writeString(dir.resolve("report.txt"), report.toString(), StandardCharsets.UTF_8);
    System.out.println("[bench] report: " + dir.resolve("report.txt"));
  }

  static String table(String workload, Map<String, List<Run>> runs, String baseline) {
    StringBuilder t = new StringBuilder();
    long base = runs.get(baseline).stream().mapToLong(Run::wall).min().orElseThrow();
    List<Run> first = runs.values().iterator().next();
    double gib = first.get(0).get("shuffle_written") / (double) (1L << 30);
    t.append(String.format("%n=== %s (%d rounds; %.2f GiB shuffle written per run by Spark's own shuffle)%n",
        workload, first.size(), gib));
    t.append("| path | best wall | median wall | vs " + baseline + " | map stage | reduce stage"
        + " | server CPU-s per GiB | server peak RSS |\n|---|---|---|---|---|---|---|---|\n");
    for (Map.Entry<String, List<Run>> e : runs.entrySet()) {
      List<Run> rs = new ArrayList<>(e.getValue());
      rs.sort((a, b) -> Long.compare(a.wall(), b.wall()));
      Run best = rs.get(0);
      long median = rs.get(rs.size() / 2).wall();
      double shuffled = rs.stream().mapToLong(r -> r.get("shuffle_written")).max().orElse(0) / (double) (1L << 30);
      boolean gateway = best.gatewayPeakRss > 0;
      double cpuPerGib = rs.stream().mapToDouble(r -> r.gatewayCpuSeconds).min().orElse(0) / Math.max(shuffled, 1e-9);
      long rss = rs.stream().mapToLong(r -> r.gatewayPeakRss).max().orElse(0);
      t.append(String.format("| %s | %.2f s | %.2f s | %.2f | %s | %s | %s | %s |%n", e.getKey(), best.wall() / 1000.0,
          median / 1000.0, best.wall() / (double) base,
          best.get("map_ms") >= 0 ? String.format("%.2f s", best.get("map_ms") / 1000.0) : "-",
          best.get("reduce_ms") >= 0 ? String.format("%.2f s", best.get("reduce_ms") / 1000.0) : "-",
          gateway ? String.format("%.2f", cpuPerGib) : "-", gateway ? SparkHarness.mb(rss) : "-"));
    }
    if (workload.equals("sql")) {
      t.append(String.format("%nper query, best of the rounds (ms):%n| query |"));
      for (String c : runs.keySet()) {
        t.append(' ').append(c).append(" |");
      }
      t.append("\n|---|").append("---|".repeat(runs.size())).append('\n');
      for (String key : first.get(0).values.keySet()) {
        if (!key.startsWith("query.")) {
          continue;
        }
        t.append("| ").append(key.substring(6, key.length() - 3)).append(" |");
        for (List<Run> rs : runs.values()) {
          t.append(' ').append(rs.stream().mapToLong(r -> r.get(key)).min().orElse(-1)).append(" |");
        }
        t.append('\n');
      }
      // The fixed cost of a shuffle: what the gateway answered, per kind.
      for (Map.Entry<String, List<Run>> e : runs.entrySet()) {
        Run r = e.getValue().get(0);
        if (r.requests.isEmpty()) {
          continue;
        }
        int stages = (int) r.get("stages");
        t.append(String.format("%n%s, round 1: requests the gateway answered (%d stages)%n", e.getKey(), stages));
        t.append("| request | count | per stage | mean ms | total s |\n|---|---|---|---|---|\n");
        for (Map.Entry<String, double[]> q : r.requests.entrySet()) {
          double[] v = q.getValue();
          t.append(String.format("| %s | %.0f | %.1f | %.2f | %.2f |%n", q.getKey(), v[0], v[0] / Math.max(stages, 1),
              v[0] > 0 ? v[1] * 1000 / v[0] : 0, v[1]));
        }
      }
    }
    return t.toString();
  }

  static Run run(String client, String workload, String memory, Path dir, int round) throws Exception {
    String name = workload + "-" + client + "-" + round;
    if (client.equals("vanilla")) {
      return new Run(client, child(client, "-", workload, dir, name), 0, 0, Map.of());
    }
    if (client.startsWith("jvm-")) {
      return runJvm(client, workload, memory, dir, name);
    }
    try (SwitchyardProcess server = SwitchyardProcess.startWithCeleborn("bench-" + name, memory)) {
      String endpoint = client.startsWith("uniffle-") ? server.coordinatorQuorum() : server.celebornMasterEndpoint();
      double cpu0 = cpuSeconds(server.pid());
      Map<String, double[]> before = requests(server.adminGet("/metrics"));
      Map<String, String> values = child(client, endpoint, workload, dir, name);
      double cpu = cpuSeconds(server.pid()) - cpu0;
      long rss = peakRss(server.pid());
      Map<String, double[]> after = requests(server.adminGet("/metrics"));
      for (Map.Entry<String, double[]> e : after.entrySet()) {
        double[] b = before.get(e.getKey());
        if (b != null) {
          e.getValue()[0] -= b[0];
          e.getValue()[1] -= b[1];
        }
      }
      after.values().removeIf(v -> v[0] <= 0);
      server.assertAlive();
      return new Run(client, values, cpu, rss, after);
    }
  }

  /**
   * A run against the JVM anchors ({@link JvmServers}): {@code jvm-uniffle-GRPC}, {@code
   * jvm-uniffle-GRPC_NETTY} or {@code jvm-celeborn-HASH}; the job is the stock client's run of
   * the same name without the prefix, and CPU and peak RSS are both server processes' sums.
   */
  static Run runJvm(String client, String workload, String memory, Path dir, String name) throws Exception {
    String stock = client.substring("jvm-".length());
    String kind = stock.substring(0, stock.indexOf('-'));
    String transport = stock.substring(stock.indexOf('-') + 1);
    try (JvmServers servers = JvmServers.start(kind, transport, dir.resolve(name + "-servers"), memory)) {
      double cpu0 = 0;
      for (long pid : servers.pids()) {
        cpu0 += cpuSeconds(pid);
      }
      Map<String, String> values = child(stock, servers.endpoint(), workload, dir, name);
      double cpu = -cpu0;
      long rss = 0;
      for (long pid : servers.pids()) {
        cpu += cpuSeconds(pid);
        rss += peakRss(pid);
      }
      servers.assertAlive();
      return new Run(client, values, cpu, rss, Map.of());
    }
  }

  /** Runs one {@link SparkBench} in a fresh JVM; its output file as key-value pairs. */
  static Map<String, String> child(String client, String endpoint, String workload, Path dir, String name)
      throws Exception {
    Path out = dir.resolve(name + ".out");
    Path log = dir.resolve(name + ".log");
    List<String> cmd = new ArrayList<>();
    cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
    cmd.add("-Xmx" + System.getProperty("switchyard.bench.heap", "3g"));
    cmd.addAll(Arrays.asList(System.getProperty("spark.java17.opens", "").trim().split("\\s+")));
    for (String p : List.of("switchyard.bench.gib", "switchyard.bench.sqlRows", "switchyard.bench.data",
        "switchyard.it.logLevel", "uniffle.client.version", "celeborn.client.version")) {
      String v = System.getProperty(p);
      if (v != null) {
        cmd.add("-D" + p + "=" + v);
      }
    }
    cmd.add("-cp");
    cmd.add(MixedProtocolTest.testClasspath());
    cmd.add(SparkBench.class.getName());
    cmd.addAll(List.of(client, endpoint, workload, out.toString()));
    ProcessBuilder pb = new ProcessBuilder(cmd)
        .directory(new File(System.getProperty("user.dir")))
        .redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.to(log.toFile()));
    pb.environment().put("SPARK_LOCAL_IP", "127.0.0.1");
    pb.environment().put("SPARK_LOCAL_HOSTNAME", "localhost");
    Process p = pb.start();
    if (!p.waitFor(30, TimeUnit.MINUTES)) {
      p.destroyForcibly();
      throw new AssertionError(name + ": no result within 30 minutes\n" + MixedProtocolTest.tail(log, 60));
    }
    if (p.exitValue() != 0 || !Files.exists(out)) {
      throw new AssertionError(name + ": exit status " + p.exitValue() + "\n" + MixedProtocolTest.tail(log, 80));
    }
    Map<String, String> values = new LinkedHashMap<>();
    for (String line : Files.readAllLines(out, StandardCharsets.UTF_8)) {
      int eq = line.indexOf('=');
      values.put(line.substring(0, eq), line.substring(eq + 1));
    }
    return values;
  }

  /** utime + stime of a process, from /proc (clock ticks of 10 ms on Linux). */
  static double cpuSeconds(long pid) throws IOException {
    String stat = Files.readString(Paths.get("/proc", Long.toString(pid), "stat"));
    String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
    // Fields 14 and 15 of stat(5), counted from the state (field 3) here.
    return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;
  }

  /** VmHWM of a process (bytes). */
  static long peakRss(long pid) throws IOException {
    for (String line : Files.readAllLines(Paths.get("/proc", Long.toString(pid), "status"))) {
      if (line.startsWith("VmHWM:")) {
        return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
      }
    }
    return -1;
  }

  private static final Pattern RPC = Pattern.compile(
      "^switchyard_rpc_duration_seconds_(count|sum)\\{([^}]*)\\} ([0-9.eE+-]+)$", Pattern.MULTILINE);

  /** Per {@code protocol/message}: {count, seconds} from the gateway's RPC histogram. */
  static Map<String, double[]> requests(String metrics) {
    Map<String, double[]> m = new TreeMap<>();
    Matcher x = RPC.matcher(metrics);
    while (x.find()) {
      String labels = x.group(2);
      String key = label(labels, "protocol") + "/" + label(labels, "message");
      double[] v = m.computeIfAbsent(key, k -> new double[2]);
      v[x.group(1).equals("count") ? 0 : 1] += Double.parseDouble(x.group(3));
    }
    return m;
  }

  private static String label(String labels, String name) {
    Matcher m = Pattern.compile(name + "=\"([^\"]*)\"").matcher(labels);
    return m.find() ? m.group(1) : "?";
  }
}
