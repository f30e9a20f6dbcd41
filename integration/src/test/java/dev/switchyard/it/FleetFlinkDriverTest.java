package dev.switchyard.it;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Tag;

/**
 * {@link FlinkDriverScenarios} against a three-node fleet ({@link SwitchyardCluster}, every node
 * a coordinator and a worker, the LifecycleManager listing all three masters): the map tasks'
 * MAP partitions are placed on several nodes, and every read scenario reads them back from
 * whichever node holds each.
 */
@Tag("fleet")
class FleetFlinkDriverTest extends FlinkDriverScenarios {

  SwitchyardCluster cluster;

  @Override
  String startServers() throws Exception {
    cluster = SwitchyardCluster.start("fleet-flink", 3, "256MiB", FleetJobsTest.FLEET_TOML);
    FleetJobsTest.waitForWorkers(cluster, 3);
    List<String> masters = new ArrayList<>();
    for (int i = 1; i <= cluster.size(); i++) {
      masters.add(cluster.celebornMasterEndpoint(i));
    }
    return String.join(",", masters);
  }

  @Override
  void stopServers() {
    if (cluster != null) {
      cluster.close();
    }
  }

  @Override
  String serverLogs() {
    StringBuilder b = new StringBuilder();
    for (int i = 1; i <= cluster.size(); i++) {
      b.append(cluster.isAlive(i) ? "" : "node " + i + " is DEAD\n").append(cluster.logTail(i, 15)).append('\n');
    }
    return b.toString();
  }

  @Override
  List<String> adminUrls() {
    List<String> urls = new ArrayList<>();
    for (int i = 1; i <= cluster.size(); i++) {
      if (!cluster.isAlive(i)) {
        throw withLog("node " + i + " died");
      }
      urls.add(cluster.adminUrl(i));
    }
    return urls;
  }

  /** The map partitions went to at least two nodes, and each of those stored bytes of them. */
  @Override
  void afterWrite(FlinkDriver.Dataset data) throws Exception {
    Set<String> hosts = new TreeSet<>();
    for (int m = 0; m < MAPPERS; m++) {
      hosts.add(data.location(m).getHost());
    }
    if (hosts.size() < 2) {
      throw withLog("all " + MAPPERS + " map partitions were placed on " + hosts);
    }
    StringBuilder line = new StringBuilder("fleet flink map partitions on " + hosts + "; stored per node:");
    for (int i = 1; i <= cluster.size(); i++) {
      long w = FleetJobsTest.written(cluster, i, "flink");
      line.append(' ').append(SparkHarness.mb(w));
      if (hosts.contains(cluster.host(i)) && w <= 0) {
        throw withLog("node " + i + " holds map partitions but stored no bytes: " + cluster.adminGet(i, "/api/v1/migration"));
      }
    }
    System.out.println("[timing] " + line);
    SparkHarness.appendTiming(line.toString());
  }

  @Override
  String killAndRestartANodeWith(FlinkDriver.Dataset data) throws Exception {
    String host = data.location(0).getHost();
    int node = -1;
    for (int i = 1; i <= cluster.size(); i++) {
      if (cluster.host(i).equals(host)) {
        node = i;
      }
    }
    if (node < 0) {
      throw withLog("map 0 was placed on " + host + ", which is no node of the cluster");
    }
    int held = 0;
    for (int m = 0; m < MAPPERS; m++) {
      held += data.location(m).getHost().equals(host) ? 1 : 0;
    }
    long t0 = System.nanoTime();
    cluster.kill(node);
    cluster.restart(node);
    long ms = (System.nanoTime() - t0) / 1_000_000;
    FleetJobsTest.waitForWorkers(cluster, 3);
    String status = cluster.adminGet(node, "/api/v1/status");
    java.util.regex.Matcher recovered =
        java.util.regex.Pattern.compile("\"recovery\":\\{[^}]*\"partitions\":(\\d+)").matcher(status);
    if (!recovered.find() || Long.parseLong(recovered.group(1)) < held) {
      throw withLog("node " + node + " holds " + held + " map partitions but recovered fewer: " + status);
    }
    return String.format("node %d (%d of %d map partitions) killed -9, back in %d ms, %s partitions recovered",
        node, held, MAPPERS, ms, recovered.group(1));
  }
}
