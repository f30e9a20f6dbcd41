package dev.switchyard.flink;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * One real Flink 1.20 batch job beside {@code switchyard-bench soak}, outside Maven's test phase
 * (run by {@code integration/soak-jobs.sh}): a word count (the suite's {@link
 * FlinkJobs#WORD_COUNT} at {@code LINES} lines) on Flink's own blocking shuffle, then through the
 * fleet with the stock Celeborn Flink client (MAP partitions, credit-based reads), the two outputs
 * compared record by record. Runs are those of {@link FlinkCelebornJobsTest#run} (a fresh
 * MiniCluster each, a deadline of {@code switchyard.flink.jobTimeout} seconds).
 *
 * <pre>
 * java ... dev.switchyard.flink.SoakFlinkMain MASTERS LINES OUT
 *   MASTERS  the Celeborn master endpoints, comma-separated
 *   OUT      one line: flink-celeborn, ok|mismatch|failed, wall ms, start epoch ms, detail (tabs)
 * </pre>
 */
public final class SoakFlinkMain {

  private SoakFlinkMain() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: SoakFlinkMain MASTERS LINES OUT");
      System.exit(2);
    }
    String masters = args[0];
    long lines = Long.parseLong(args[1]);
    Path out = Paths.get(args[2]);
    Files.createDirectories(FlinkCelebornJobsTest.WORK_DIR.resolve("tmp"));
    FlinkJobs.Job job = wordCount(lines);
    String label = "flink-celeborn";
    long start;
    String status;
    String detail;
    // The reference first (Flink's own shuffle); its failure is no fault of the fleet's but
    // leaves nothing to compare with, so it is reported as a failed round.
    FlinkCelebornJobsTest.Run vanilla;
    try {
      vanilla = FlinkCelebornJobsTest.run(job, "vanilla", FlinkCelebornJobsTest.baseConf());
    } catch (Throwable t) {
      long now = System.currentTimeMillis();
      write(out, label, "failed", 0, now, "the reference run on Flink's own shuffle failed: " + t);
      System.exit(0);
      return;
    }
    List<String> want = FlinkJobs.sortedRecords(vanilla.runId());
    start = System.currentTimeMillis();
    try {
      FlinkCelebornJobsTest.Run remote = FlinkCelebornJobsTest.run(job, "celeborn", conf(masters));
      List<String> got = FlinkJobs.sortedRecords(remote.runId());
      if (want.equals(got)) {
        status = "ok";
        detail = String.format("%d words of %d lines equal Flink's own shuffle (%d bytes into the shuffle)",
            got.size(), lines, remote.bytesOut());
      } else {
        status = "mismatch";
        detail = firstDifference(want, got);
      }
    } catch (Throwable t) {
      status = "failed";
      detail = FlinkCelebornJobsTest.rootCause(t);
      t.printStackTrace();
    }
    long wall = System.currentTimeMillis() - start;
    write(out, label, status, wall, start, detail);
    System.out.printf("[soak-job] %s %s in %d ms: %s%n", label, status, wall, detail);
    System.exit(0);
  }

  /**
   * The suite's client settings, and a job that may restart its failed region twice, as a
   * production job would. No replicas: the Flink client refuses them ("Flink does not support
   * replicate shuffle data"), so a fault that takes a worker's data fails the run's reads.
   */
  static Map<String, String> conf(String masters) {
    Map<String, String> c = FlinkCelebornJobsTest.celebornConf(masters);
    c.put("restart-strategy.type", "fixed-delay");
    c.put("restart-strategy.fixed-delay.attempts", "2");
    c.put("restart-strategy.fixed-delay.delay", "2s");
    return c;
  }

  /** {@link FlinkJobs#WORD_COUNT}'s pipeline over {@code lines} lines (about 4.5 words each). */
  static FlinkJobs.Job wordCount(long lines) {
    return new FlinkJobs.Job() {
      @Override
      public String name() {
        return "soakWordCount";
      }

      @Override
      public void build(StreamExecutionEnvironment env, String runId, int scale) {
        env.fromSequence(0, lines - 1)
            .setParallelism(FlinkJobs.SOURCE_PARALLELISM)
            .flatMap(new FlinkJobs.Words())
            .setParallelism(FlinkJobs.SOURCE_PARALLELISM)
            .keyBy(new FlinkJobs.StringKey())
            .sum(1)
            .setParallelism(3)
            .addSink(new FlinkJobs.CollectSink<>(runId))
            .setParallelism(3);
      }
    };
  }

  static String firstDifference(List<String> want, List<String> got) {
    int i = 0;
    while (i < want.size() && i < got.size() && want.get(i).equals(got.get(i))) {
      i++;
    }
    return "output differs from Flink's own shuffle: " + want.size() + " vs " + got.size()
        + " records, first difference at " + i + ": " + (i < want.size() ? want.get(i) : "<end>")
        + " vs " + (i < got.size() ? got.get(i) : "<end>");
  }

  static void write(Path out, String label, String status, long wall, long start, String detail)
      throws Exception {
    String flat = String.valueOf(detail).replaceAll("\\s+", " ").trim();
    if (flat.length() > 400) {
      flat = flat.substring(0, 400) + "...";
    }
    String line = String.join("\t", label, status, Long.toString(wall), Long.toString(start), flat);
    Files.createDirectories(out.toAbsolutePath().getParent());
    Path tmp = out.resolveSibling(out.getFileName() + ".tmp");
    Files.writeString(tmp, line + "\n", StandardCharsets.UTF_8);
    Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }
}
