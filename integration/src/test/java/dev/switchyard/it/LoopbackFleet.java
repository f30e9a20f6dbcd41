package dev.switchyard.it;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A few {@link SwitchyardProcess} nodes on 127.0.0.1, each on free ports of its own, as one
 * fleet: node 1 coordinates (Uniffle coordinator, cluster port) and stores, the others only
 * store and heartbeat node 1. Unlike {@link SwitchyardCluster} (127.0.0.2-4 on the default
 * ports) it can run beside other tests. Uniffle only; every node has the admin token {@link
 * #TOKEN} (decommission needs it).
 */
final class LoopbackFleet implements AutoCloseable {

  static final String TOKEN = "integration-admin";

  final List<SwitchyardProcess> nodes = new ArrayList<>();

  /**
   * Starts {@code n} nodes with {@code memory} each and {@code uniffleExtra} lines in every
   * node's {@code [uniffle]}, then waits until node 1 lists all of them as active.
   */
  static LoopbackFleet start(String name, int n, String memory, String uniffleExtra) throws Exception {
    return start(name, n, memory, uniffleExtra, i -> "");
  }

  /** As above, with {@code nodeToml.apply(i)}: whole TOML tables for node {@code i} only. */
  static LoopbackFleet start(
      String name, int n, String memory, String uniffleExtra, java.util.function.IntFunction<String> nodeToml)
      throws Exception {
    int clusterPort = SwitchyardProcess.freeLoopbackPorts(1)[0];
    LoopbackFleet fleet = new LoopbackFleet();
    try {
      for (int i = 1; i <= n; i++) {
        String cluster = "[cluster]\n"
            + "coordinators = [\"127.0.0.1:" + clusterPort + "\"]\n"
            + "listen = \"127.0.0.1:" + clusterPort + "\"\n"
            + "roles = [" + (i == 1 ? "\"coordinator\", \"worker\"" : "\"worker\"") + "]\n"
            + "secret = \"integration-loopback-fleet\"\n"
            + "heartbeat_interval = \"1s\"\n"
            + "worker_timeout = \"10s\"\n"
            + "warmup = \"1s\"\n"
            + "decommission_check_interval = \"1s\"\n";
        fleet.nodes.add(SwitchyardProcess.startWithSections(
            name + "-" + i, memory, "token = \"" + TOKEN + "\"\n", uniffleExtra, cluster + nodeToml.apply(i)));
      }
      fleet.waitForActive(n);
      return fleet;
    } catch (Exception | Error e) {
      fleet.close();
      throw e;
    }
  }

  SwitchyardProcess node(int i) {
    return nodes.get(i - 1);
  }

  /** {@code spark.rss.coordinator.quorum}: node 1's coordinator. */
  String quorum() {
    return node(1).coordinatorQuorum();
  }

  /** Workers in {@code state} ({@code active}, {@code decommissioning}) on node 1's cluster page. */
  int workersIn(String state) throws IOException, InterruptedException {
    return node(1).adminGet("/api/v1/cluster").split("\"state\":\"" + state + "\"", -1).length - 1;
  }

  void waitForActive(int n) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
    while (workersIn("active") < n) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("node 1 lists " + workersIn("active") + " active workers, not " + n
            + ": " + node(1).adminGet("/api/v1/cluster"));
      }
      Thread.sleep(200);
    }
  }

  /** POSTs {@code /api/v1/decommission} with the token to node {@code i}: the HTTP status. */
  int decommission(int i) throws IOException, InterruptedException {
    java.net.http.HttpClient http = java.net.http.HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    java.net.http.HttpRequest req = java.net.http.HttpRequest.newBuilder(
            java.net.URI.create(node(i).adminUrl() + "/api/v1/decommission"))
        .timeout(Duration.ofSeconds(5))
        .header("Authorization", "Bearer " + TOKEN)
        .POST(java.net.http.HttpRequest.BodyPublishers.noBody())
        .build();
    return http.send(req, java.net.http.HttpResponse.BodyHandlers.ofString()).statusCode();
  }

  /** A metric's sum on node {@code i} over the samples whose labels contain {@code label}. */
  double metric(int i, String metric, String label) throws IOException, InterruptedException {
    return SwitchyardProcess.metricSum(node(i).adminGet("/metrics"), metric, label);
  }

  /** A counter without labels (0 when absent) on node {@code i}. */
  double counter(int i, String metric) throws IOException, InterruptedException {
    for (String line : node(i).adminGet("/metrics").split("\n")) {
      if (line.startsWith(metric + " ") || line.startsWith(metric + "{")) {
        return Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    return 0;
  }

  /** Every node's appended bytes, node 1 first. */
  long[] appended() {
    long[] out = new long[nodes.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = nodes.get(i).isAlive() ? nodes.get(i).appendedBytes() : -1;
    }
    return out;
  }

  @Override
  public void close() {
    for (int i = nodes.size() - 1; i >= 0; i--) {
      nodes.get(i).close();
    }
  }
}
