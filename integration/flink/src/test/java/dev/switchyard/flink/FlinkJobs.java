package dev.switchyard.flink;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.JoinFunction;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.Partitioner;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.operators.Order;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.RichSinkFunction;
import org.apache.flink.streaming.api.windowing.assigners.GlobalWindows;
import org.apache.flink.util.Collector;

/**
 * The Flink batch jobs of {@link FlinkCelebornJobsTest}. Inputs are generated inside the tasks
 * from the record index ({@code fromSequence}), so results do not depend on the shuffle
 * implementation or on timing; every operator's parallelism but the join's is set explicitly
 * (the adaptive batch scheduler decides only that one). Outputs go to {@link CollectSink},
 * which keeps each subtask's records in this JVM (the MiniCluster runs in the test JVM).
 */
final class FlinkJobs {

  private FlinkJobs() {}

  static final int SOURCE_PARALLELISM = 4;

  /** A job: builds its pipeline on {@code env}, writing to {@code new CollectSink(runId)}. */
  interface Job {
    String name();

    void build(StreamExecutionEnvironment env, String runId, int scale);
  }

  /** SplitMix64: a bijection on longs, used to derive every generated value. */
  static long mix(long z) {
    z += 0x9E3779B97F4A7C15L;
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }

  // ---------------------------------------------------------------- word count

  static final int WC_LINES = 300_000;
  static final int WC_VOCABULARY = 50_000;

  /**
   * Word count: {@code WC_LINES} generated lines of 1–8 skewed words, flatMap to (word, 1),
   * keyBy(word).sum into 3 reducers. In BATCH mode there is no map-side combine: every
   * (word, 1) record is shuffled (about 1.35M records, 18 MB before compression).
   */
  static final Job WORD_COUNT =
      new Job() {
        @Override
        public String name() {
          return "wordCount";
        }

        @Override
        public void build(StreamExecutionEnvironment env, String runId, int scale) {
          env.fromSequence(0, (long) WC_LINES * scale - 1)
              .setParallelism(SOURCE_PARALLELISM)
              .flatMap(new Words())
              .setParallelism(SOURCE_PARALLELISM)
              .keyBy(new StringKey())
              .sum(1)
              .setParallelism(3)
              .addSink(new CollectSink<>(runId))
              .setParallelism(3);
        }
      };

  static final class Words implements FlatMapFunction<Long, Tuple2<String, Integer>> {
    @Override
    public void flatMap(Long line, Collector<Tuple2<String, Integer>> out) {
      for (int w : words(line)) {
        out.collect(Tuple2.of(word(w), 1));
      }
    }
  }

  /** Word ids of line {@code line}: 1–8 words, skewed towards small ids. */
  static int[] words(long line) {
    long h = mix(line);
    int n = 1 + (int) Math.floorMod(h, 8L);
    int[] ids = new int[n];
    for (int j = 0; j < n; j++) {
      long r = mix(line * 16 + j + 0x5eedL);
      long a = Math.floorMod(r, (long) WC_VOCABULARY);
      long b = Math.floorMod(r >>> 32, 1000L) + 1;
      ids[j] = (int) (a * b / 1000);
    }
    return ids;
  }

  static String word(int id) {
    return id % 7 == 0 ? "word-" + id + "-with-a-longer-tail" : "w" + id;
  }

  static final class StringKey implements KeySelector<Tuple2<String, Integer>, String> {
    @Override
    public String getKey(Tuple2<String, Integer> t) {
      return t.f0;
    }
  }

  // ---------------------------------------------------------------- join

  static final int JOIN_LEFT = 400_000;
  static final int JOIN_RIGHT = 120_000;
  static final long JOIN_LEFT_KEYS = 40_000;
  static final long JOIN_RIGHT_KEYS = 60_000;

  /**
   * Inner join then aggregate: left (key in 40k, id) and right (key in 60k, id), joined on key
   * over an end-of-stream global window (about 800k pairs), then keyBy(key) reduce to (key,
   * pairs, sum of pair hashes) in 3 subtasks. Three shuffles: both inputs into the join, the join
   * output into the aggregation. The join's parallelism is left to Flink's adaptive batch
   * scheduler, which picks 1 for these 5 MB: that one task reads all 4 subpartitions of every
   * map partition of both inputs as ranges (two input gates).
   */
  static final Job JOIN =
      new Job() {
        @Override
        public String name() {
          return "joinAggregate";
        }

        @Override
        public void build(StreamExecutionEnvironment env, String runId, int scale) {
          DataStream<Tuple2<Long, Long>> left =
              env.fromSequence(0, (long) JOIN_LEFT * scale - 1)
                  .setParallelism(SOURCE_PARALLELISM)
                  .map(new JoinSide(JOIN_LEFT_KEYS, 0L))
                  .setParallelism(SOURCE_PARALLELISM);
          DataStream<Tuple2<Long, Long>> right =
              env.fromSequence(0, (long) JOIN_RIGHT * scale - 1)
                  .setParallelism(SOURCE_PARALLELISM)
                  .map(new JoinSide(JOIN_RIGHT_KEYS, 0x7F4A7C15L))
                  .setParallelism(SOURCE_PARALLELISM);
          left.join(right)
              .where(new LongKey())
              .equalTo(new LongKey())
              .window(GlobalWindows.createWithEndOfStreamTrigger())
              // apply() returns a DataStream, whose parallelism cannot be set: the adaptive
              // batch scheduler picks it from the data volume
              .apply(new PairHash())
              .keyBy(new Tuple3Key())
              .reduce(new SumPairs())
              .setParallelism(3)
              .addSink(new CollectSink<>(runId))
              .setParallelism(3);
        }
      };

  static final class JoinSide implements MapFunction<Long, Tuple2<Long, Long>> {
    private final long keys;
    private final long salt;

    JoinSide(long keys, long salt) {
      this.keys = keys;
      this.salt = salt;
    }

    @Override
    public Tuple2<Long, Long> map(Long i) {
      return Tuple2.of(Math.floorMod(mix(i ^ salt), keys), i);
    }
  }

  static final class LongKey implements KeySelector<Tuple2<Long, Long>, Long> {
    @Override
    public Long getKey(Tuple2<Long, Long> t) {
      return t.f0;
    }
  }

  static final class Tuple3Key implements KeySelector<Tuple3<Long, Long, Long>, Long> {
    @Override
    public Long getKey(Tuple3<Long, Long, Long> t) {
      return t.f0;
    }
  }

  /** (key, 1, hash of the pair of ids). */
  static final class PairHash
      implements JoinFunction<Tuple2<Long, Long>, Tuple2<Long, Long>, Tuple3<Long, Long, Long>> {
    @Override
    public Tuple3<Long, Long, Long> join(Tuple2<Long, Long> l, Tuple2<Long, Long> r) {
      return Tuple3.of(l.f0, 1L, mix(l.f1 * 1_000_003L + r.f1));
    }
  }

  static final class SumPairs implements ReduceFunction<Tuple3<Long, Long, Long>> {
    @Override
    public Tuple3<Long, Long, Long> reduce(Tuple3<Long, Long, Long> a, Tuple3<Long, Long, Long> b) {
      return Tuple3.of(a.f0, a.f1 + b.f1, a.f2 + b.f2);
    }
  }

  // ---------------------------------------------------------------- sort

  static final int SORT_RECORDS = 300_000;
  static final int SORT_PARTITIONS = 5;

  /**
   * Total sort: {@code SORT_RECORDS} records (distinct 63-bit key, payload of 16–79 chars),
   * range-partitioned on the key into 5 subtasks (custom partitioner), each sorting its
   * partition ({@code fullWindowPartition().sortPartition}); subtask i holds the i-th key range,
   * so the subtasks' outputs in order are the sorted input. About 20 MB shuffled.
   */
  static final Job SORT =
      new Job() {
        @Override
        public String name() {
          return "sortByKey";
        }

        @Override
        public void build(StreamExecutionEnvironment env, String runId, int scale) {
          env.fromSequence(0, (long) SORT_RECORDS * scale - 1)
              .setParallelism(SOURCE_PARALLELISM)
              .map(new SortRecord())
              .setParallelism(SOURCE_PARALLELISM)
              .partitionCustom(new RangePartitioner(), new SortKey())
              .fullWindowPartition()
              .sortPartition(new SortKey(), Order.ASCENDING)
              .setParallelism(SORT_PARTITIONS)
              .addSink(new CollectSink<>(runId))
              .setParallelism(SORT_PARTITIONS);
        }
      };

  static final class SortRecord implements MapFunction<Long, Tuple2<Long, String>> {
    @Override
    public Tuple2<Long, String> map(Long i) {
      long key = mix(i) & Long.MAX_VALUE;
      int len = 16 + (int) Math.floorMod(mix(~i), 64L);
      StringBuilder sb = new StringBuilder(len);
      long x = key;
      while (sb.length() < len) {
        x = mix(x);
        sb.append(Long.toString(x & Long.MAX_VALUE, 36));
      }
      sb.setLength(len);
      return Tuple2.of(key, sb.toString());
    }
  }

  static final class SortKey implements KeySelector<Tuple2<Long, String>, Long> {
    @Override
    public Long getKey(Tuple2<Long, String> t) {
      return t.f0;
    }
  }

  /** Key in [0, 2^63) to partition {@code key * n / 2^63}, so partition order = key order. */
  static final class RangePartitioner implements Partitioner<Long> {
    @Override
    public int partition(Long key, int numPartitions) {
      return (int) (((key >>> 31) * numPartitions) >>> 32);
    }
  }

  // ---------------------------------------------------------------- results

  /** runId -> subtask index -> records ({@code toString()} of each), in arrival order. */
  static final Map<String, Map<Integer, List<String>>> RESULTS = new ConcurrentHashMap<>();

  static void reset(String runId) {
    RESULTS.put(runId, new ConcurrentHashMap<>());
  }

  /** Each subtask's records, by subtask index (missing subtasks: empty lists). */
  static TreeMap<Integer, List<String>> results(String runId) {
    TreeMap<Integer, List<String>> out = new TreeMap<>();
    Map<Integer, List<String>> m = RESULTS.get(runId);
    if (m != null) {
      m.forEach((k, v) -> out.put(k, new ArrayList<>(v)));
    }
    return out;
  }

  /** Every record of the run, sorted (for jobs whose output order is not defined). */
  static List<String> sortedRecords(String runId) {
    List<String> all = new ArrayList<>();
    results(runId).values().forEach(all::addAll);
    Collections.sort(all);
    return all;
  }

  /** Keeps each subtask's records in {@link #RESULTS}. */
  static final class CollectSink<T> extends RichSinkFunction<T> {
    private final String runId;
    private transient List<String> records;

    CollectSink(String runId) {
      this.runId = runId;
    }

    @Override
    public void invoke(T value, Context context) {
      if (records == null) {
        int subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
        records =
            RESULTS.get(runId)
                .computeIfAbsent(subtask, k -> Collections.synchronizedList(new ArrayList<>()));
      }
      records.add(String.valueOf(value));
    }
  }
}
