package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URL;
import java.nio.file.Paths;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Celeborn client alone, without switchyard: SparkShuffleManager comes from the Maven
 * version under test, and a job pointed at a master that is not listening, or that accepts
 * connections and never answers, fails (rather than hanging, or quietly falling back to Spark's
 * own shuffle) within our fail-fast settings.
 */
@Tag("celeborn")
class CelebornClientSmokeTest {

  @Test
  void celebornShuffleManagerLoadsFromClientJar() throws Exception {
    Class<?> c = Class.forName(SparkHarness.CELEBORN_MANAGER);
    URL where = c.getProtectionDomain().getCodeSource().getLocation();
    System.out.println("[suite] " + SparkHarness.CELEBORN_MANAGER + " from " + where);
    String jar = SparkHarness.celebornJar();
    if (jar != null) {
      assertEquals(Paths.get(jar).toRealPath(), Paths.get(where.toURI()).toRealPath(),
          "SparkShuffleManager loaded from " + where + ", expected -Dceleborn.client.jar");
    } else {
      String v = System.getProperty("celeborn.client.version", "");
      assertTrue(where.getPath().contains("/celeborn-client-spark-3-shaded_2.12/" + v + "/"),
          "SparkShuffleManager loaded from " + where + ", expected Maven version " + v);
    }
    // The shaded client reports its own version; it must be the one the pom asked for.
    Class<?> info = Class.forName("org.apache.celeborn.common.util.Utils");
    System.out.println("[suite] celeborn common classes from "
        + info.getProtectionDomain().getCodeSource().getLocation());
  }

  @Test
  @Timeout(value = 5, unit = TimeUnit.MINUTES)
  void unreachableMasterFailsTheJob() throws Exception {
    for (String writer : SparkHarness.celebornWriters()) {
      int deadPort = SwitchyardProcess.freeLoopbackPorts(1)[0];
      expectBoundedFailure("deadMaster/" + writer, "127.0.0.1:" + deadPort, writer);
    }
  }

  /**
   * A master that accepts connections and never answers (a hung server): the endpoint lookup
   * and asks must time out (celeborn.rpc.lookupTimeout, celeborn.masterClient.rpc.askTimeout).
   */
  @Test
  @Timeout(value = 5, unit = TimeUnit.MINUTES)
  void silentMasterFailsTheJob() throws Exception {
    List<Socket> accepted = new CopyOnWriteArrayList<>();
    try (ServerSocket silent = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
      Thread acceptor = new Thread(() -> {
        try {
          while (true) {
            accepted.add(silent.accept()); // hold it open, read nothing, answer nothing
          }
        } catch (IOException e) {
          // closed
        }
      }, "silent-master");
      acceptor.setDaemon(true);
      acceptor.start();
      expectBoundedFailure("silentMaster/" + SparkHarness.celebornWriters().get(0),
          "127.0.0.1:" + silent.getLocalPort(), SparkHarness.celebornWriters().get(0));
    } finally {
      for (Socket s : accepted) {
        s.close();
      }
    }
  }

  private static void expectBoundedFailure(String label, String masterEndpoint, String writer) {
    SparkConf conf = SparkHarness.withCeleborn(
        SparkHarness.baseConf("celeborn-" + label.replace('/', '-'), SparkHarness.CELEBORN_MASTER),
        masterEndpoint, writer);
    long start = System.nanoTime();
    Throwable failure = null;
    try {
      SparkHarness.runApp(conf, spark -> {
        System.out.printf("[suite] %s: SparkSession up after %d ms; running a shuffle%n",
            label, (System.nanoTime() - start) / 1_000_000);
        return Jobs.jsc(spark).parallelize(Jobs.range(100), 4)
            .mapToPair(i -> new scala.Tuple2<>(i % 10, 1)).reduceByKey(Integer::sum).count();
      });
    } catch (Throwable t) {
      failure = t;
    }
    long ms = (System.nanoTime() - start) / 1_000_000;
    String msg = failure == null ? "no failure" : ClientSmokeTest.chain(failure);
    System.out.printf("[suite] %s: failed after %d ms: %s%n", label, ms, msg);
    SparkHarness.appendTiming(String.format("%-14s failed after %d ms", label, ms));
    assertTrue(failure != null, label + ": the job succeeded (fallback to Spark's own shuffle?)");
    assertTrue(ms < 120_000, label + ": the job took " + ms + " ms to fail");
  }
}
