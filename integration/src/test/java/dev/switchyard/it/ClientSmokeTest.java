package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URL;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Checks the client side alone, without switchyard: the RssShuffleManager class comes from the
 * client jar under test, and a job pointed at a coordinator that is not there fails with an error
 * (rather than hanging) within our fail-fast settings.
 */
@Tag("uniffle")
class ClientSmokeTest {

  @Test
  void rssShuffleManagerLoadsFromClientJar() throws Exception {
    Class<?> c = Class.forName(SparkHarness.RSS_MANAGER);
    URL where = c.getProtectionDomain().getCodeSource().getLocation();
    System.out.println("[suite] " + SparkHarness.RSS_MANAGER + " from " + where);
    String jar = SparkHarness.clientJar();
    if (jar != null) {
      assertTrue(where.getPath().endsWith("/" + new java.io.File(jar).getName()),
          "RssShuffleManager loaded from " + where + ", expected " + jar);
    } else {
      String v = System.getProperty("uniffle.client.version", "");
      assertTrue(where.getPath().contains("/rss-client-spark3-shaded/" + v + "/"),
          "RssShuffleManager loaded from " + where + ", expected Maven version " + v);
    }
  }

  @Test
  @Timeout(value = 4, unit = TimeUnit.MINUTES)
  void unreachableCoordinatorFailsTheJob() throws Exception {
    int deadPort = SwitchyardProcess.freeLoopbackPorts(1)[0];
    SparkConf conf = SparkHarness.withUniffle(
        SparkHarness.baseConf("rss-dead-coordinator"), "127.0.0.1:" + deadPort, SparkHarness.clientType());
    long start = System.nanoTime();
    Throwable failure = null;
    String phase = "session start";
    try {
      SparkHarness.runApp(conf, spark -> {
        System.out.printf("[suite] dead coordinator: SparkSession up after %d ms; running a shuffle%n",
            (System.nanoTime() - start) / 1_000_000);
        return Jobs.jsc(spark).parallelize(Jobs.range(100), 4)
            .mapToPair(i -> new scala.Tuple2<>(i % 10, 1)).reduceByKey(Integer::sum).count();
      });
    } catch (Throwable t) {
      failure = t;
    }
    long ms = (System.nanoTime() - start) / 1_000_000;
    String msg = failure == null ? "no failure" : chain(failure);
    System.out.printf("[suite] dead coordinator: failed after %d ms: %s%n", ms, msg);
    SparkHarness.appendTiming(String.format("deadCoord      failed after %d ms", ms));
    assertTrue(failure != null, "a job against a dead coordinator succeeded");
  }

  static String chain(Throwable t) {
    StringBuilder sb = new StringBuilder();
    for (Throwable c = t; c != null && sb.length() < 2000; c = c.getCause()) {
      sb.append("\n    ").append(c.getClass().getName()).append(": ").append(c.getMessage());
    }
    return sb.toString();
  }
}
