package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link SwitchyardCluster} without Spark: three nodes on 127.0.0.2-4 with the default ports,
 * each with its own node id; one killed and restarted keeps its id, one stopped exits 0. Tag
 * {@code cluster}: {@code mvn -Dtest=SwitchyardClusterTest test} runs it (so does {@code
 * -Dshuffle.client=cluster}); the default run does not.
 */
@Tag("cluster")
class SwitchyardClusterTest {

  private static void assertRefused(String host, int port) {
    assertThrows(ConnectException.class, () -> {
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress(host, port), 2000);
      }
    }, host + ":" + port + " still accepts connections");
  }

  private static boolean ready(SwitchyardCluster c, int i) {
    try {
      return c.adminGet(i, "/readyz").equals("ready");
    } catch (IOException | InterruptedException e) {
      return false;
    }
  }

  @Test
  @Timeout(value = 3, unit = TimeUnit.MINUTES)
  void threeNodesWithTheirOwnIdsSurviveKillAndRestart() throws Exception {
    try (SwitchyardCluster cluster = SwitchyardCluster.start("it", 3)) {
      List<String> ids = new ArrayList<>();
      for (int i = 1; i <= 3; i++) {
        String host = "127.0.0." + (i + 1);
        assertEquals(host, cluster.host(i));
        String status = cluster.status(i);
        String id = cluster.nodeId(i);
        assertTrue(id.matches("sy-[0-9a-f]{12}"), "generated id " + id);
        assertTrue(status.contains("\"admin\":\"" + host + ":19990\""), status);
        assertTrue(status.contains("\"server_id\":\"" + id + "\""), status);
        assertTrue(status.contains("\"coordinator\":\"" + host + ":19999\""), status);
        assertTrue(status.contains("\"master\":\"" + host + ":9097\""), status);
        assertTrue(status.contains("\"worker_id\":\"" + host + ":9100:9101:9102:9103\""), status);
        assertEquals(id, Files.readString(cluster.dataDir(i).resolve("node-id"), StandardCharsets.UTF_8).trim());
        assertTrue(cluster.adminGet(i, "/metrics").contains("node=\"" + id + "\""), "metrics carry the node label");
        ids.add(id);
      }
      assertEquals(3, new HashSet<>(ids).size(), "ids not distinct: " + ids);

      // kill -9 node 2: its ports refuse, 1 and 3 stay ready.
      assertEquals(137, cluster.kill(2));
      assertFalse(cluster.isAlive(2));
      for (int port : SwitchyardCluster.DEFAULT_PORTS.values()) {
        assertRefused(cluster.host(2), port);
      }
      assertTrue(ready(cluster, 1) && ready(cluster, 3));

      // Back on the same data dir: the same id, read from the node-id file.
      cluster.restart(2);
      assertEquals(ids.get(1), cluster.nodeId(2));
      assertTrue(cluster.status(2).contains("\"id_source\":\"persisted\""), cluster.status(2));

      // A taken default port: a clear failure that names it.
      assertEquals(0, cluster.stop(3));
      try (ServerSocket squatter = new ServerSocket()) {
        squatter.bind(new InetSocketAddress(cluster.host(3), 9102));
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> cluster.restart(3));
        assertTrue(e.getMessage().contains("127.0.0.4:9102 (celeborn.worker_fetch_listen)"), e.getMessage());
      }

      // SIGTERM: exit status 0; the others keep running.
      assertEquals(0, cluster.stop(1));
      assertRefused(cluster.host(1), 19990);
      assertTrue(ready(cluster, 2));
      assertNotEquals(ids.get(0), cluster.nodeId(2));
    }
  }
}
