package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Celeborn's TLS with the stock client: a switchyard with {@code [celeborn.tls]} (a self-signed
 * certificate made here with openssl) and authentication on serves a job whose client sets {@code
 * spark.celeborn.ssl.rpc_service.enabled} and {@code spark.celeborn.ssl.data.enabled} (no
 * trustStore: the 0.5.x client then trusts any certificate), and its result equals Spark's own
 * shuffle. A client that does not speak TLS is refused and stores nothing.
 */
@Tag("celeborn")
@Timeout(value = 5, unit = TimeUnit.MINUTES)
class CelebornTlsTest {

  static SwitchyardProcess server;
  static Path certDir;

  @BeforeAll
  static void startServer() throws Exception {
    if (SparkHarness.vanillaOnly()) {
      return;
    }
    certDir = Files.createTempDirectory("switchyard-tls-");
    Path cert = certDir.resolve("cert.pem");
    Path key = certDir.resolve("key.pem");
    Process p = new ProcessBuilder("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
            "-keyout", key.toString(), "-out", cert.toString(), "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")
        .redirectErrorStream(true)
        .start();
    String out = new String(p.getInputStream().readAllBytes());
    if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
      throw new IllegalStateException("openssl could not make a certificate: " + out);
    }
    server = SwitchyardProcess.startWithCelebornAuth("celeborn-tls", "256MiB",
        "[celeborn.tls]\ncert = \"" + SwitchyardProcess.tomlEscape(cert.toString()) + "\"\n"
            + "key = \"" + SwitchyardProcess.tomlEscape(key.toString()) + "\"\n");
  }

  @AfterAll
  static void stopServer() {
    if (server != null) {
      server.close();
      server = null;
    }
  }

  static SparkHarness.Client tls(String writer) {
    SparkHarness.Client auth = CelebornAuthTest.authenticated(writer);
    return new SparkHarness.Client() {
      public String label() {
        return auth.label() + " over TLS";
      }

      public String sparkMaster() {
        return auth.sparkMaster();
      }

      public SparkConf configure(SparkConf conf, SwitchyardProcess s) {
        return auth.configure(conf, s)
            // With auth the driver reaches the master and worker RPC through rpc_service;
            // executors push and fetch through data.
            .set("spark.celeborn.ssl.rpc_service.enabled", "true")
            .set("spark.celeborn.ssl.data.enabled", "true");
      }
    };
  }

  @Test
  void jobOverTlsEqualsVanilla() {
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.compareWithVanilla(
        "tlsGroupSort/" + writer, server, tls(writer), Jobs::groupByKeySortByKey,
        (e, a) -> Compare.sameList("groupByKey+sortByKey over TLS", e, a));
  }

  @Test
  void plaintextClientIsRefused() throws Exception {
    String writer = SparkHarness.celebornWriters().get(0);
    SparkHarness.Client plain = CelebornAuthTest.authenticated(writer);
    SparkConf conf = plain.configure(
        SparkHarness.baseConf("plaintext-" + writer, plain.sparkMaster()), server);
    long before = server.appendedBytes();
    assertThrows(Throwable.class, () -> SparkHarness.runApp(conf, Jobs::groupByKeySortByKey));
    server.assertAlive();
    assertEquals(before, server.appendedBytes(), "nothing of the plaintext client was stored");
    double failed = 0;
    for (String line : server.adminGet("/metrics").split("\n")) {
      if (line.startsWith("switchyard_tls_handshake_failures_total{") && line.contains("port=\"master\"")) {
        failed += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
      }
    }
    assertTrue(failed >= 1, "the master port refused the plaintext connections in the TLS handshake");
  }
}
