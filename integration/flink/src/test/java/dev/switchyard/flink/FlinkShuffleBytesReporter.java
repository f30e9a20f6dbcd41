package dev.switchyard.flink;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/**
 * A metric reporter (configured by {@link FlinkCelebornJobsTest} as
 * {@code metrics.reporter.switchyard.factory.class}) that keeps every task's {@code numBytesOut}
 * counter: the bytes the tasks wrote into their result partitions, i.e. into the shuffle. The
 * Celeborn client counts each buffer's data before compression and without headers. Runs are
 * sequential, so one static set serves the run in progress; {@link #reset()} before each.
 */
public final class FlinkShuffleBytesReporter implements MetricReporter {

  private static final Set<Counter> COUNTERS = Collections.synchronizedSet(Collections.newSetFromMap(new IdentityHashMap<>()));

  static void reset() {
    COUNTERS.clear();
  }

  /** Sum of the task-level numBytesOut counters registered since {@link #reset()}. */
  static long bytesOut() {
    synchronized (COUNTERS) {
      return COUNTERS.stream().mapToLong(Counter::getCount).sum();
    }
  }

  /** Number of task-level counters seen (one per subtask attempt). */
  static int counters() {
    return COUNTERS.size();
  }

  @Override
  public void open(MetricConfig config) {}

  @Override
  public void close() {}

  @Override
  public void notifyOfAddedMetric(Metric metric, String name, MetricGroup group) {
    // The task's own counter (TaskIOMetricGroup registers it on the task's group), not an
    // operator's. The Celeborn client registers a second numBytesOut in a per-shuffle group
    // below the task (ShuffleMetricGroup, variable <shuffle_id>) and counts the same bytes
    // there: not that one either. (The group seen here is the registry's per-reporter wrapper,
    // so its class says nothing: go by its variables.)
    if ("numBytesOut".equals(name) && metric instanceof Counter) {
      Map<String, String> vars = group.getAllVariables();
      if (vars.containsKey("<task_attempt_id>")
          && !vars.containsKey("<operator_id>")
          && !vars.containsKey("<shuffle_id>")) {
        COUNTERS.add((Counter) metric);
      }
    }
  }

  @Override
  public void notifyOfRemovedMetric(Metric metric, String name, MetricGroup group) {
    // keep the counter: its final value is read after the job
  }

  /** Listed in META-INF/services/org.apache.flink.metrics.reporter.MetricReporterFactory. */
  public static final class Factory implements MetricReporterFactory {
    @Override
    public MetricReporter createMetricReporter(Properties properties) {
      return new FlinkShuffleBytesReporter();
    }
  }
}
