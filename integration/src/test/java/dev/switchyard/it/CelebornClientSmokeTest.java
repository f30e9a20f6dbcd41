package dev.switchyard.it;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URL;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Celeborn client alone, without switchyard: SparkShuffleManager comes from the Maven
 * version under test, and a job pointed at a master that is not listening fails (rather than
 * hanging, or quietly falling back to Spark's own shuffle) within our fail-fast settings.
 */
@Tag("celeborn")
class CelebornClientSmokeTest {

  @Test
  void celebornShuffleManagerLoadsFromClientJar() throws Exception {
    Class<?> c = Class.forName(SparkHarness.CELEBORN_MANAGER);
    URL where = c.getProtectionDomain().getCodeSource().getLocation();
    System.out.println("[suite] " + SparkHarness.CELEBORN_MANAGER + " from " + where);
    String v = System.getProperty("celeborn.client.version", "");
    assertTrue(where.getPath().contains("/celeborn-client-spark-3-shaded_2.12/" + v + "/"),
        "SparkShuffleManager loaded from " + where + ", expected Maven version " + v);
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
      SparkConf conf = SparkHarness.withCeleborn(
          SparkHarness.baseConf("celeborn-dead-master", SparkHarness.CELEBORN_MASTER),
          "127.0.0.1:" + deadPort, writer);
      long start = System.nanoTime();
      Throwable failure = null;
      try {
        SparkHarness.runApp(conf, spark -> {
          System.out.printf("[suite] dead master (%s): SparkSession up after %d ms; running a shuffle%n",
              writer, (System.nanoTime() - start) / 1_000_000);
          return Jobs.jsc(spark).parallelize(Jobs.range(100), 4)
              .mapToPair(i -> new scala.Tuple2<>(i % 10, 1)).reduceByKey(Integer::sum).count();
        });
      } catch (Throwable t) {
        failure = t;
      }
      long ms = (System.nanoTime() - start) / 1_000_000;
      String msg = failure == null ? "no failure" : ClientSmokeTest.chain(failure);
      System.out.printf("[suite] dead master (%s): failed after %d ms: %s%n", writer, ms, msg);
      SparkHarness.appendTiming(String.format("deadMaster/%s failed after %d ms", writer, ms));
      assertTrue(failure != null, "a job against a dead Celeborn master succeeded (fallback to Spark's shuffle?)");
      assertTrue(ms < 120_000, "a job against a dead Celeborn master took " + ms + " ms to fail");
    }
  }
}
