package dev.switchyard.it;

import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The job shapes of Celeborn's own Spark ITs, each run on Spark's own shuffle and then through
 * switchyard with the stock Celeborn client ({@code local[2]}, fallback forbidden), once per writer
 * (HASH and SORT; {@code -Dceleborn.writers=SORT} picks one). One switchyard process (Uniffle and
 * Celeborn enabled, 256 MiB memory) for the whole class.
 */
@Tag("celeborn")
@Timeout(value = 5, unit = java.util.concurrent.TimeUnit.MINUTES)
class CelebornJobsTest {

  static SwitchyardProcess server;

  static List<String> writers() {
    return SparkHarness.celebornWriters();
  }

  @BeforeAll
  static void startServer() throws Exception {
    System.out.println(
        "[suite] CelebornJobsTest: client " + SparkHarness.celebornLabel() + ", writers " + writers()
            + (SparkHarness.vanillaOnly() ? ", VANILLA ONLY (no switchyard)" : ""));
    if (!SparkHarness.vanillaOnly()) {
      server = SwitchyardProcess.startWithCeleborn("celeborn-jobs", "256MiB");
    }
  }

  @AfterAll
  static void stopServer() {
    if (server != null) {
      server.close();
      server = null;
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("writers")
  void combineByKey(String writer) throws Exception {
    long started = System.currentTimeMillis();
    SparkHarness.compareWithVanilla(
        "combineByKey/" + writer, server, SparkHarness.celeborn(writer), Jobs::combineByKey,
        (e, a) -> Compare.sameMap("combineByKey", e, a));
    FinishedApps.assertListed(server, "celeborn", started, true);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("writers")
  void groupByKeySortByKey(String writer) {
    SparkHarness.compareWithVanilla(
        "groupSort/" + writer, server, SparkHarness.celeborn(writer), Jobs::groupByKeySortByKey,
        (e, a) -> Compare.sameList("groupByKey+sortByKey", e, a));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("writers")
  void repartitionReduceByKey(String writer) {
    SparkHarness.compareWithVanilla(
        "repartRBK/" + writer, server, SparkHarness.celeborn(writer), Jobs::repartitionReduceByKey,
        (e, a) -> Compare.sameMap("repartition+reduceByKey", e, a));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("writers")
  void sqlJoinAggregate(String writer) {
    SparkHarness.compareWithVanilla(
        "sqlJoinAgg/" + writer, server, SparkHarness.celeborn(writer), Jobs::sqlJoinAggregate,
        (e, a) -> Compare.sameList("sqlJoinAggregate", e, a));
  }
}
