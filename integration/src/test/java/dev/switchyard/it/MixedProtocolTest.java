package dev.switchyard.it;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * ONE switchyard process serving both protocols, and two Spark applications at the same time: one
 * with the stock Uniffle client, one with the stock Celeborn client, each in its own child JVM
 * ({@link MixedJobMain}; one SparkContext per JVM). Each shuffles {@code switchyard.mixed.records}
 * records (default 2M, about 220 MB) of the large job, with 256 MiB of server memory for both. Both
 * results are compared with the same job on Spark's own shuffle (run first, in this JVM), the two
 * jobs' [start, end] windows must overlap, and the server's appended bytes must cover what both
 * wrote.
 *
 * <p>With {@code switchyard.vanillaOnly=true} both children run on Spark's own shuffle (checks the
 * harness itself).
 */
@Tag("mixed")
@Timeout(value = 12, unit = TimeUnit.MINUTES)
class MixedProtocolTest {

  static final long CHILD_TIMEOUT_MINUTES = 8;

  record Outcome(long start, long end, long written, long read, List<Jobs.PartitionDigest> parts) {}

  record Child(String client, Process process, Path out, Path log) {}

  @Test
  void uniffleAndCelebornJobsAtTheSameTime() throws Exception {
    long records = Long.getLong("switchyard.mixed.records", 2_000_000L);
    String uniffleType = SparkHarness.clientType();
    String writer = SparkHarness.celebornWriters().get(0);
    System.out.printf(
        "[suite] MixedProtocolTest: %d records per job, uniffle %s %s + celeborn %s %s%s%n",
        records, uniffleType, SparkHarness.clientLabel(), writer, SparkHarness.celebornLabel(),
        SparkHarness.vanillaOnly() ? ", VANILLA ONLY (no switchyard)" : "");

    // Expected result first, alone, in this JVM.
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla =
        SparkHarness.runApp(SparkHarness.baseConf("vanilla-mixed", "local[2]"), spark -> Jobs.largeShuffle(spark, records));
    System.out.printf("[suite] vanilla: %d ms, shuffle written %s%n", vanilla.jobMillis(),
        SparkHarness.mb(vanilla.shuffleBytesWritten()));

    SwitchyardProcess server = SparkHarness.vanillaOnly() ? null : SwitchyardProcess.startWithCeleborn("mixed", "256MiB");
    try {
      String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss"));
      Path dir = Paths.get("target", "mixed", stamp).toAbsolutePath();
      Path barrier = dir.resolve("barrier");
      Files.createDirectories(barrier);
      String uClient = server == null ? "vanilla" : "uniffle-" + uniffleType;
      String cClient = server == null ? "vanilla" : "celeborn-" + writer;
      long appendedBefore = server == null ? 0 : server.appendedBytes();

      List<Child> children = new ArrayList<>();
      children.add(launch("a-" + uClient, uClient, server == null ? "-" : server.coordinatorQuorum(), records, dir, barrier));
      children.add(launch("b-" + cClient, cClient, server == null ? "-" : server.celebornMasterEndpoint(), records, dir, barrier));

      List<Outcome> outcomes = new ArrayList<>();
      List<String> failures = new ArrayList<>();
      long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(CHILD_TIMEOUT_MINUTES);
      for (Child c : children) {
        long left = Math.max(1, deadline - System.nanoTime());
        boolean done = c.process().waitFor(left, TimeUnit.NANOSECONDS);
        if (!done) {
          c.process().destroyForcibly().waitFor(10, TimeUnit.SECONDS);
          failures.add(c.client() + ": no result within " + CHILD_TIMEOUT_MINUTES + " minutes (killed)\n" + tail(c.log(), 60));
          outcomes.add(null);
        } else if (c.process().exitValue() != 0 || !Files.exists(c.out())) {
          failures.add(c.client() + ": exit status " + c.process().exitValue() + "\n" + tail(c.log(), 80));
          outcomes.add(null);
        } else {
          outcomes.add(parse(c.out()));
        }
      }
      if (!failures.isEmpty()) {
        for (Child c : children) {
          c.process().destroyForcibly();
        }
        throw new AssertionError(String.join("\n\n", failures)
            + (server == null ? "" : "\n\n" + (server.isAlive() ? "" : "switchyard is DEAD\n") + server.logTail(60)));
      }
      if (server != null) {
        server.assertAlive();
      }

      Outcome u = outcomes.get(0);
      Outcome c = outcomes.get(1);
      String line = String.format(
          "mixed          vanilla %6d ms | %s %6d ms [%d..%d] w %s | %s %6d ms [%d..%d] w %s | overlap %d ms",
          vanilla.jobMillis(), uClient, u.end() - u.start(), u.start() % 1_000_000, u.end() % 1_000_000,
          SparkHarness.mb(u.written()), cClient, c.end() - c.start(), c.start() % 1_000_000, c.end() % 1_000_000,
          SparkHarness.mb(c.written()), Math.min(u.end(), c.end()) - Math.max(u.start(), c.start()));
      System.out.println("[timing] " + line);
      SparkHarness.appendTiming(line);

      Compare.sameList("mixed: " + uClient + " per-partition (count, hashSum)", vanilla.value(), u.parts());
      Compare.sameList("mixed: " + cClient + " per-partition (count, hashSum)", vanilla.value(), c.parts());
      if (!(u.start() < c.end() && c.start() < u.end())) {
        throw new AssertionError(String.format(
            "the two jobs did not run at the same time: %s [%d, %d], %s [%d, %d]",
            uClient, u.start(), u.end(), cClient, c.start(), c.end()));
      }
      if (server != null) {
        long appended = server.appendedBytes() - appendedBefore;
        long written = u.written() + c.written();
        if (appended < written) {
          throw new AssertionError(String.format(
              "switchyard stored %d bytes but the two jobs wrote %d shuffle bytes (%d + %d)",
              appended, written, u.written(), c.written()));
        }
      }
    } finally {
      if (server != null) {
        server.close();
      }
    }
  }

  /** Starts {@code java ... MixedJobMain} with this JVM's test classpath and Java 17 flags. */
  static Child launch(String name, String client, String endpoint, long records, Path dir, Path barrier)
      throws IOException {
    return launch(name, client, endpoint, records, dir, barrier, 2);
  }

  /** As above, with {@code parties} jobs meeting at the barrier before they start. */
  static Child launch(String name, String client, String endpoint, long records, Path dir, Path barrier, int parties)
      throws IOException {
    Path out = dir.resolve(name + ".out");
    Path log = dir.resolve(name + ".log");
    List<String> cmd = new ArrayList<>();
    cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
    cmd.add("-Xmx" + System.getProperty("switchyard.mixed.heap", "3g"));
    String opens = System.getProperty("spark.java17.opens", "");
    if (opens.isBlank()) {
      throw new IllegalStateException("system property spark.java17.opens not set (run through Maven)");
    }
    cmd.addAll(Arrays.asList(opens.trim().split("\\s+")));
    for (String p : new String[] {
        "switchyard.it.logLevel", "switchyard.it.uniffleLogLevel", "switchyard.it.celebornLogLevel",
        "uniffle.client.version", "celeborn.client.version"}) {
      String v = System.getProperty(p);
      if (v != null) {
        cmd.add("-D" + p + "=" + v);
      }
    }
    cmd.add("-cp");
    cmd.add(testClasspath());
    cmd.add(MixedJobMain.class.getName());
    cmd.addAll(List.of(client, endpoint, Long.toString(records), out.toString(), barrier.toString(), Integer.toString(parties)));
    ProcessBuilder pb = new ProcessBuilder(cmd)
        .directory(new File(System.getProperty("user.dir")))
        .redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.to(log.toFile()));
    pb.environment().put("SPARK_LOCAL_IP", "127.0.0.1");
    pb.environment().put("SPARK_LOCAL_HOSTNAME", "localhost");
    pb.environment().put("CELEBORN_LOCAL_IP", "127.0.0.1");
    Process p = pb.start();
    // Do not leave a child behind if this JVM is killed.
    Runtime.getRuntime().addShutdownHook(new Thread(p::destroyForcibly, "mixed-" + name + "-reaper"));
    System.out.printf("[suite] started %s (pid %d), log %s%n", name, p.pid(), log);
    return new Child(client, p, out, log);
  }

  /** Surefire's test classpath (java.class.path is its booter jar when forked). */
  static String testClasspath() {
    String cp = System.getProperty("surefire.test.class.path");
    if (cp == null || cp.isBlank()) {
      cp = System.getProperty("java.class.path");
    }
    return cp;
  }

  static Outcome parse(Path f) throws IOException {
    long start = -1;
    long end = -1;
    long written = -1;
    long read = -1;
    List<Jobs.PartitionDigest> parts = new ArrayList<>();
    for (String l : Files.readAllLines(f, StandardCharsets.UTF_8)) {
      if (l.startsWith("start=")) {
        start = Long.parseLong(l.substring(6));
      } else if (l.startsWith("end=")) {
        end = Long.parseLong(l.substring(4));
      } else if (l.startsWith("written=")) {
        written = Long.parseLong(l.substring(8));
      } else if (l.startsWith("read=")) {
        read = Long.parseLong(l.substring(5));
      } else if (l.startsWith("part ")) {
        String[] w = l.split(" ");
        parts.add(new Jobs.PartitionDigest(Long.parseLong(w[1]), Long.parseLong(w[2])));
      }
    }
    if (start < 0 || end < start || written < 0) {
      throw new AssertionError("malformed result file " + f);
    }
    return new Outcome(start, end, written, read, parts);
  }

  static String tail(Path log, int lines) {
    try {
      List<String> all = Files.readAllLines(log, StandardCharsets.UTF_8);
      return "---- last lines of " + log + " ----\n"
          + String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
    } catch (IOException e) {
      return "(cannot read " + log + ": " + e + ")";
    }
  }
}
