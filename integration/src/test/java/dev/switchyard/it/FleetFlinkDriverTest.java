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
}
