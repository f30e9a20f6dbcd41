package dev.switchyard.it;

import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Small Spark jobs, each run on Spark's own shuffle and then through switchyard with the stock
 * Uniffle client (one switchyard process, 256 MiB memory, for the whole class).
 */
@Timeout(value = 5, unit = java.util.concurrent.TimeUnit.MINUTES)
@Tag("uniffle")
class ShuffleJobsTest {

  static SwitchyardProcess server;

  @BeforeAll
  static void startServer() throws Exception {
    System.out.println(
        "[suite] ShuffleJobsTest: client " + SparkHarness.clientLabel() + ", transport " + SparkHarness.clientType()
            + (SparkHarness.vanillaOnly() ? ", VANILLA ONLY (no switchyard)" : ""));
    if (!SparkHarness.vanillaOnly()) {
      server = SwitchyardProcess.start("jobs", "256MiB");
    }
  }

  @AfterAll
  static void stopServer() {
    if (server != null) {
      server.close();
      server = null;
    }
  }

  @Test
  void reduceByKey() throws Exception {
    long started = System.currentTimeMillis();
    SparkHarness.compareWithVanilla(
        "reduceByKey", server, Jobs::reduceByKey, (e, a) -> Compare.sameMap("reduceByKey", e, a));
    FinishedApps.assertListed(server, "uniffle", started, FinishedApps.uniffleClientTellsVersion());
  }

  @Test
  void groupByKey() {
    SparkHarness.compareWithVanilla(
        "groupByKey", server, Jobs::groupByKey, (e, a) -> Compare.sameMap("groupByKey", e, a));
  }

  @Test
  void repartition() {
    SparkHarness.compareWithVanilla(
        "repartition",
        server,
        Jobs::repartition,
        (e, a) -> {
          Compare.sameMultiset(
              "repartition: all records",
              e.stream().flatMap(List::stream).toList(),
              a.stream().flatMap(List::stream).toList());
          Compare.sameList("repartition: partition sizes",
              e.stream().map(List::size).toList(), a.stream().map(List::size).toList());
          for (int i = 0; i < e.size(); i++) {
            Compare.sameList("repartition: partition " + i, e.get(i), a.get(i));
          }
        });
  }

  @Test
  void sortByKey() {
    SparkHarness.compareWithVanilla(
        "sortByKey", server, Jobs::sortByKey, (e, a) -> Compare.sameList("sortByKey", e, a));
  }

  @Test
  void sqlJoinAggregate() {
    SparkHarness.compareWithVanilla(
        "sqlJoinAgg", server, Jobs::sqlJoinAggregate, (e, a) -> Compare.sameList("sqlJoinAggregate", e, a));
  }
}
