package dev.switchyard.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;

/**
 * One Spark application in its own JVM, for {@link MixedProtocolTest}: runs {@link
 * Jobs#largeShuffle} through switchyard with one client and writes the result and timestamps to a
 * file. A JVM can hold one SparkContext, and the two shaded clients are kept apart this way too.
 *
 * <pre>
 * java ... dev.switchyard.it.MixedJobMain CLIENT ENDPOINT RECORDS OUT_FILE BARRIER_DIR PARTIES
 *   CLIENT      uniffle-GRPC | uniffle-GRPC_NETTY | celeborn-HASH | celeborn-SORT | vanilla
 *   ENDPOINT    coordinator quorum (uniffle) or master endpoint (celeborn); "-" for vanilla
 *   BARRIER_DIR once its SparkSession is up, the job writes OUT_FILE_NAME.ready here and waits (up to 3
 *               minutes) until PARTIES such files exist, so that the jobs start together
 * </pre>
 *
 * <p>OUT_FILE (written at the end, atomically): {@code start=<epoch ms>}, {@code end=<epoch ms>},
 * {@code written=<shuffle bytes>}, {@code read=<shuffle bytes>}, then one {@code part <count>
 * <hashSum>} line per output partition. Exit status 0 on success, 1 on failure (stack trace on
 * stderr).
 */
public final class MixedJobMain {

  private MixedJobMain() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      System.err.println("usage: MixedJobMain CLIENT ENDPOINT RECORDS OUT_FILE BARRIER_DIR PARTIES");
      System.exit(2);
    }
    String client = args[0];
    String endpoint = args[1];
    long records = Long.parseLong(args[2]);
    Path out = Paths.get(args[3]);
    Path barrier = Paths.get(args[4]);
    int parties = Integer.parseInt(args[5]);
    try {
      run(client, endpoint, records, out, barrier, parties);
      System.exit(0);
    } catch (Throwable t) {
      System.err.println("[mixed:" + client + "] FAILED");
      t.printStackTrace();
      System.exit(1);
    }
  }

  static SparkConf conf(String client, String endpoint) {
    // Both applications local[2] (they share the machine's 2 cores).
    SparkConf conf = SparkHarness.baseConf("mixed-" + client, "local[2]");
    if (client.startsWith("uniffle-")) {
      return SparkHarness.withUniffle(conf, endpoint, client.substring("uniffle-".length()));
    } else if (client.startsWith("celeborn-")) {
      return SparkHarness.withCeleborn(conf, endpoint, client.substring("celeborn-".length()));
    } else if (client.equals("vanilla")) {
      return conf;
    }
    throw new IllegalArgumentException("unknown client " + client);
  }

  static void run(String client, String endpoint, long records, Path out, Path barrier, int parties)
      throws Exception {
    SparkConf conf = conf(client, endpoint);
    long t0 = System.currentTimeMillis();
    SparkSession spark = SparkSession.builder().config(conf).getOrCreate();
    SparkHarness.ShuffleBytes bytes = new SparkHarness.ShuffleBytes();
    spark.sparkContext().addSparkListener(bytes);
    try {
      System.out.printf("[mixed:%s] SparkSession up after %d ms%n", client, System.currentTimeMillis() - t0);
      Files.createDirectories(barrier);
      Files.writeString(barrier.resolve(out.getFileName() + ".ready"), Long.toString(System.currentTimeMillis()));
      long deadline = System.currentTimeMillis() + 180_000;
      while (countReady(barrier) < parties) {
        if (System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("the other jobs did not get ready within 3 minutes");
        }
        Thread.sleep(50);
      }
      long start = System.currentTimeMillis();
      System.out.printf("[mixed:%s] job starts at %d%n", client, start);
      List<Jobs.PartitionDigest> result = Jobs.largeShuffle(spark, records);
      long end = System.currentTimeMillis();
      System.out.printf("[mixed:%s] job done at %d (%d ms)%n", client, end, end - start);
      try {
        spark.sparkContext().listenerBus().waitUntilEmpty(10_000);
      } catch (java.util.concurrent.TimeoutException e) {
        System.err.println("listener bus not drained: shuffle byte counts may be low");
      }
      List<String> lines = new ArrayList<>();
      lines.add("start=" + start);
      lines.add("end=" + end);
      lines.add("written=" + bytes.written.sum());
      lines.add("read=" + bytes.read.sum());
      for (Jobs.PartitionDigest d : result) {
        lines.add("part " + d.count() + " " + d.hashSum());
      }
      Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
      Files.write(tmp, lines, StandardCharsets.UTF_8);
      Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    } finally {
      spark.stop();
    }
  }

  private static long countReady(Path dir) throws IOException {
    try (var s = Files.list(dir)) {
      return s.filter(p -> p.getFileName().toString().endsWith(".ready")).count();
    }
  }
}
