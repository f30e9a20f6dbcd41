package dev.switchyard.it;

import java.util.List;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * {@link FlinkDriverScenarios} with Celeborn's authentication on: switchyard runs with {@code
 * celeborn.auth_enabled}, the driver and its TaskManagers with {@code celeborn.auth.enabled=true}.
 * The LifecycleManager registers the application's secret on the master port, and every push and
 * read connection of the Flink path authenticates with SASL DIGEST-MD5 before its first message
 * (the read side through the bootstraps {@code FlinkTransportClientFactory} gets from {@code
 * createBootstraps()}). Every scenario must pass as without authentication. Then a driver without
 * authentication is refused: its map tasks fail and nothing of it is stored.
 */
@Tag("celeborn-flink")
class CelebornFlinkAuthTest extends CelebornFlinkDriverTest {

  double digestsAtStart;

  @Override
  boolean authEnabled() {
    return true;
  }

  @Override
  String startServers() throws Exception {
    server = SwitchyardProcess.startWithCelebornAuth("flink-auth", "256MiB");
    digestsAtStart = CelebornFlinkAuthTest.metric(server, "switchyard_celeborn_auth_total", "result=\"digest\"");
    return server.celebornMasterEndpoint();
  }

  /** Sum of the samples of {@code metric} whose labels contain {@code label}. */
  static double metric(SwitchyardProcess s, String metric, String label) throws Exception {
    return SwitchyardProcess.metricSum(s.adminGet("/metrics"), metric, label);
  }

  /** The scenarios' connections (the worker RPC, pushes, reads) authenticated. */
  @Test
  @Order(20)
  void theFlinkConnectionsAuthenticated() throws Exception {
    double registered = metric(server, "switchyard_celeborn_auth_total", "result=\"registered\"");
    double digests = metric(server, "switchyard_celeborn_auth_total", "result=\"digest\"") - digestsAtStart;
    if (registered < 1) {
      throw withLog("the LifecycleManager did not register its secret on the master port");
    }
    // At least the LifecycleManager's worker RPC, one push and one read connection.
    if (digests < 3) {
      throw withLog("only " + digests + " connections authenticated with DIGEST-MD5 during the scenarios");
    }
    System.out.printf("[suite] CelebornFlinkAuthTest: %.0f connections authenticated, %.0f secrets registered%n",
        digests, registered);
  }

  /** A Flink driver without authentication gets nothing stored. */
  @Test
  @Order(21)
  void aDriverWithoutAuthIsRefused() throws Exception {
    long before = server.appendedBytes();
    List<String> failures;
    try (FlinkDriver plain = new FlinkDriver(server.celebornMasterEndpoint(), false)) {
      FlinkDriverClient plainTm = plain.newTaskManager();
      FlinkDriver.Dataset d = plain.newDataset(2, 4, 1, 8 * 1024, 7L);
      try {
        failures = plain.writeAll(plainTm, d, 2);
      } catch (RuntimeException e) {
        failures = List.of(String.valueOf(e));
      }
    }
    server.assertAlive();
    if (failures.isEmpty()) {
      throw withLog("map tasks of a driver without authentication succeeded against an authenticated server");
    }
    if (server.appendedBytes() != before) {
      throw withLog("the refused driver's data was stored: " + (server.appendedBytes() - before) + " bytes");
    }
    System.out.printf("[suite] CelebornFlinkAuthTest: a driver without auth was refused (%s)%n",
        failures.get(0).lines().findFirst().orElse(""));
  }
}
