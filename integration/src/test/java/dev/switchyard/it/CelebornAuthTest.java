package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Celeborn's authentication with the stock client: a switchyard with {@code celeborn.auth_enabled}
 * serves a job whose client runs with {@code spark.celeborn.auth.enabled=true} (the driver registers
 * its secret on the master port; the driver's worker RPC and the executors' push and fetch
 * connections authenticate with SASL DIGEST-MD5), and its result equals Spark's own shuffle. The
 * server's counters must show the registration and the DIGEST handshakes. A client without
 * authentication is refused: its job fails (fallback forbidden) and nothing of it is stored.
 */
@Tag("celeborn")
@Timeout(value = 5, unit = java.util.concurrent.TimeUnit.MINUTES)
class CelebornAuthTest {

  static SwitchyardProcess server;

  @BeforeAll
  static void startServer() throws Exception {
    if (!SparkHarness.vanillaOnly()) {
      server = SwitchyardProcess.startWithCelebornAuth("celeborn-auth", "256MiB");
    }
  }

  @AfterAll
  static void stopServer() {
    if (server != null) {
      server.close();
      server = null;
    }
  }

  /** The stock client with authentication on. */
  static SparkHarness.Client authenticated(String writer) {
    SparkHarness.Client plain = SparkHarness.celeborn(writer);
    return new SparkHarness.Client() {
      public String label() {
        return plain.label() + " with auth";
      }

      public String sparkMaster() {
        return plain.sparkMaster();
      }

      public SparkConf configure(SparkConf conf, SwitchyardProcess s) {
        return plain.configure(conf, s).set("spark.celeborn.auth.enabled", "true");
      }
    };
  }

  /** Sum of the samples of {@code metric} whose labels contain {@code label}. */
  static double metric(String metric, String label) throws Exception {
    return SwitchyardProcess.metricSum(server.adminGet("/metrics"), metric, label);
  }

  @Test
  void authenticatedJobEqualsVanilla() throws Exception {
    String writer = SparkHarness.celebornWriters().get(0);
    double registered = metric("switchyard_celeborn_auth_total", "result=\"registered\"");
    double digests = metric("switchyard_celeborn_auth_total", "result=\"digest\"");
    SparkHarness.compareWithVanilla(
        "authRBK/" + writer, server, authenticated(writer), Jobs::repartitionReduceByKey,
        (e, a) -> Compare.sameMap("repartition+reduceByKey with auth", e, a));
    assertTrue(metric("switchyard_celeborn_auth_total", "result=\"registered\"") >= registered + 1,
        "the driver registered its secret on the master port\n" + server.logTail(40));
    // At least the driver's worker RPC connection and the executors' push and fetch.
    assertTrue(metric("switchyard_celeborn_auth_total", "result=\"digest\"") >= digests + 2,
        "connections authenticated with DIGEST-MD5\n" + server.logTail(40));
  }

  @Test
  void clientWithoutAuthIsRefused() throws Exception {
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Client plain = SparkHarness.celeborn(writer);
    SparkConf conf = plain.configure(
        SparkHarness.baseConf("noauth-" + writer, plain.sparkMaster()), server);
    long before = server.appendedBytes();
    assertThrows(Throwable.class, () -> SparkHarness.runApp(conf, Jobs::repartitionReduceByKey));
    server.assertAlive();
    assertEquals(before, server.appendedBytes(), "nothing of the refused client was stored");
    assertTrue(metric("switchyard_celeborn_errors_total", "port=\"master\"") >= 1,
        "the master refused the unauthenticated client");
  }
}
