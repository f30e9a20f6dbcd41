package dev.switchyard.it;

import java.util.List;
import org.junit.jupiter.api.Tag;

/** {@link FlinkDriverScenarios} against one switchyard node with every role. */
@Tag("celeborn-flink")
class CelebornFlinkDriverTest extends FlinkDriverScenarios {

  SwitchyardProcess server;

  @Override
  String startServers() throws Exception {
    server = SwitchyardProcess.startWithCeleborn("flink-driver", "256MiB");
    return server.celebornMasterEndpoint();
  }

  @Override
  void stopServers() {
    if (server != null) {
      server.close();
    }
  }

  @Override
  String serverLogs() {
    return (server.isAlive() ? "" : "switchyard is DEAD\n") + server.logTail(40);
  }

  @Override
  List<String> adminUrls() {
    server.assertAlive();
    return List.of(server.adminUrl());
  }
}
