package dev.switchyard.it;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;

/**
 * One real Spark job beside {@code switchyard-bench soak}, outside Maven's test phase (run by
 * {@code integration/soak-jobs.sh}, one JVM per client so that a hung client cannot hold up the
 * other and the two shaded clients stay apart): {@link Jobs#largeShuffle} through a fleet with one
 * stock client, its per-partition (count, hashSum) compared with the same job on Spark's own
 * shuffle.
 *
 * <pre>
 * java ... dev.switchyard.it.SoakJobMain CLIENT ENDPOINTS RECORDS REFERENCE OUT
 *   CLIENT     uniffle-GRPC | uniffle-GRPC_NETTY | celeborn-HASH | celeborn-SORT
 *   ENDPOINTS  the coordinator quorum (uniffle) or the master endpoints (celeborn), comma-separated
 *   REFERENCE  the round's result on Spark's own shuffle: read when it exists, else computed
 *              here first and written (so a round computes it once)
 *   OUT        one line is written here: CLIENT, ok|mismatch|failed, wall ms, start epoch ms,
 *              detail, tab-separated
 * </pre>
 *
 * <p>Exit status 0 whenever OUT was written (the soak judges the line), 1 otherwise.
 */
public final class SoakJobMain {

  private SoakJobMain() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: SoakJobMain CLIENT ENDPOINTS RECORDS REFERENCE OUT");
      System.exit(2);
    }
    String client = args[0];
    String endpoints = args[1];
    long records = Long.parseLong(args[2]);
    Path reference = Paths.get(args[3]);
    Path out = Paths.get(args[4]);
    List<Jobs.PartitionDigest> expected = reference(reference, records);
    String label = "spark-" + client;
    long start = System.currentTimeMillis();
    String status;
    String detail;
    // The Spark application id, which the fleet's /api/v1/apps lists (Uniffle adds a suffix).
    AtomicReference<String> app = new AtomicReference<>("not started");
    try {
      SparkHarness.Timed<List<Jobs.PartitionDigest>> run = SparkHarness.runApp(
          conf(client, endpoints), spark -> {
            app.set(spark.sparkContext().applicationId());
            return Jobs.largeShuffle(spark, records, PARTITIONS);
          });
      String diff = difference(expected, run.value());
      status = diff == null ? "ok" : "mismatch";
      detail = diff == null
          ? String.format("%d records in %d partitions equal Spark's own shuffle (%s written)",
              records, PARTITIONS, SparkHarness.mb(run.shuffleBytesWritten()))
          : diff;
    } catch (AssertionError e) {
      // Jobs.largeShuffle's own checks: a total that differs from the records generated, or a
      // partition out of place. Data went missing or appeared: that is a mismatch, not an error.
      status = "mismatch";
      detail = e.getMessage();
    } catch (Throwable t) {
      status = "failed";
      detail = rootCause(t);
      t.printStackTrace();
    }
    long wall = System.currentTimeMillis() - start;
    detail = "application " + app.get() + ": " + detail;
    write(out, String.join("\t", label, status, Long.toString(wall), Long.toString(start), oneLine(detail)));
    System.out.printf("[soak-job] %s %s in %d ms: %s%n", label, status, wall, detail);
    // Threads of a client that failed midway may keep the JVM alive.
    System.exit(0);
  }

  /** Small: the soak's own load is the volume; this proves the stock clients' paths. */
  static final int PARTITIONS = 20;

  /**
   * The stock client against the fleet, with the settings production would have under faults:
   * task retries (local[2,4]: a task may run 4 times, as spark.task.maxFailures defaults to on a
   * cluster), replicas on both protocols, and Celeborn's fetch failures as stage reruns. A single
   * node (switchyard-bench neighbours) has nowhere to put a second copy: there
   * {@code -Dswitchyard.soak.replicas=1} (soak-jobs.sh's SOAK_JOBS_REPLICAS) asks for none.
   */
  static SparkConf conf(String client, String endpoints) {
    SparkConf conf = SparkHarness.baseConf("soak-" + client, "local[2,4]");
    boolean replicas = Integer.getInteger("switchyard.soak.replicas", 2) > 1;
    if (client.startsWith("uniffle-")) {
      SparkConf c = SparkHarness.withUniffle(conf, endpoints, client.substring("uniffle-".length()));
      return replicas
          ? c.set("spark.rss.data.replica", "2")
              .set("spark.rss.data.replica.write", "2")
              .set("spark.rss.data.replica.read", "1")
          : c;
    } else if (client.startsWith("celeborn-")) {
      return SparkHarness.withCeleborn(conf, endpoints, client.substring("celeborn-".length()))
          .set("spark.celeborn.client.push.replicate.enabled", Boolean.toString(replicas))
          .set("spark.celeborn.client.spark.fetch.throwsFetchFailure", "true");
    }
    throw new IllegalArgumentException("unknown client " + client);
  }

  /** The round's reference: read, or computed on Spark's own shuffle and written atomically. */
  static List<Jobs.PartitionDigest> reference(Path file, long records) throws Exception {
    if (Files.exists(file)) {
      List<Jobs.PartitionDigest> parts = new ArrayList<>();
      for (String l : Files.readAllLines(file, StandardCharsets.UTF_8)) {
        String[] w = l.split(" ");
        parts.add(new Jobs.PartitionDigest(Long.parseLong(w[0]), Long.parseLong(w[1])));
      }
      return parts;
    }
    SparkHarness.Timed<List<Jobs.PartitionDigest>> vanilla = SparkHarness.runApp(
        SparkHarness.baseConf("soak-vanilla", "local[2]"), spark -> Jobs.largeShuffle(spark, records, PARTITIONS));
    System.out.printf("[soak-job] reference on Spark's own shuffle: %d ms%n", vanilla.jobMillis());
    List<String> lines = new ArrayList<>();
    for (Jobs.PartitionDigest d : vanilla.value()) {
      lines.add(d.count() + " " + d.hashSum());
    }
    Files.createDirectories(file.toAbsolutePath().getParent());
    Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
    Files.write(tmp, lines, StandardCharsets.UTF_8);
    Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    return vanilla.value();
  }

  /** The first differing partitions, or null when equal. */
  static String difference(List<Jobs.PartitionDigest> want, List<Jobs.PartitionDigest> got) {
    try {
      Compare.sameList("per-partition (count, hashSum) against Spark's own shuffle", want, got);
      return null;
    } catch (AssertionError e) {
      return e.getMessage();
    }
  }

  static String rootCause(Throwable t) {
    Throwable r = t;
    while (r.getCause() != null && r.getCause() != r) {
      r = r.getCause();
    }
    return r == t ? t.toString() : t.getClass().getSimpleName() + ": ... caused by " + r;
  }

  /** Tabs and newlines out, at most 400 characters: one field of one line. */
  static String oneLine(String s) {
    String flat = String.valueOf(s).replaceAll("\\s+", " ").trim();
    return flat.length() > 400 ? flat.substring(0, 400) + "..." : flat;
  }

  static void write(Path out, String line) throws Exception {
    Files.createDirectories(out.toAbsolutePath().getParent());
    Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
    Files.writeString(tmp, line + "\n", StandardCharsets.UTF_8);
    Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }
}
