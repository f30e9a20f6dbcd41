package dev.switchyard.it;

import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.count;
import static org.apache.spark.sql.functions.countDistinct;
import static org.apache.spark.sql.functions.max;
import static org.apache.spark.sql.functions.min;
import static org.apache.spark.sql.functions.sum;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.spark.HashPartitioner;
import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import scala.Tuple2;
import scala.Tuple3;
import scala.Tuple4;

/**
 * The jobs. Every input is generated from fixed seeds inside the tasks, so each job gives the same
 * result on every run and on every shuffle implementation; results are returned in a form that
 * compares with {@code equals} (sorted maps, sorted lists, or lists whose order the job defines).
 */
public final class Jobs {

  static final long SEED = 0x5317c4a11L;

  private Jobs() {}

  static JavaSparkContext jsc(SparkSession spark) {
    return JavaSparkContext.fromSparkContext(spark.sparkContext());
  }

  static List<Integer> range(int n) {
    return IntStream.range(0, n).boxed().collect(Collectors.toList());
  }

  // ---------------------------------------------------------------- reduceByKey

  static final int RBK_MAPS = 16;
  static final int RBK_PER_MAP = 100_000;
  static final int RBK_KEYS = 20_000;

  /** key -> (count, sum) over 1.6M records, map-side combine, 8 reducers. */
  public static TreeMap<Long, Tuple2<Long, Long>> reduceByKey(SparkSession spark) {
    JavaPairRDD<Long, Tuple2<Long, Long>> pairs =
        jsc(spark)
            .parallelize(range(RBK_MAPS), RBK_MAPS)
            .flatMapToPair(
                p -> {
                  Random r = new Random(SEED * 31 + p);
                  List<Tuple2<Long, Tuple2<Long, Long>>> out = new ArrayList<>(RBK_PER_MAP);
                  for (int i = 0; i < RBK_PER_MAP; i++) {
                    out.add(new Tuple2<>((long) r.nextInt(RBK_KEYS), new Tuple2<>(1L, (long) r.nextInt(1_000_000))));
                  }
                  return out.iterator();
                });
    Map<Long, Tuple2<Long, Long>> m =
        pairs.reduceByKey((a, b) -> new Tuple2<>(a._1() + b._1(), a._2() + b._2()), 8).collectAsMap();
    return new TreeMap<>(m);
  }

  // ---------------------------------------------------------------- groupByKey

  static final int GBK_MAPS = 16;
  static final int GBK_PER_MAP = 25_000;
  static final int GBK_KEYS = 5_000;

  /** key -> sorted values; no map-side combine, 12 reducers. */
  public static TreeMap<Integer, List<String>> groupByKey(SparkSession spark) {
    JavaPairRDD<Integer, String> pairs =
        jsc(spark)
            .parallelize(range(GBK_MAPS), GBK_MAPS)
            .flatMapToPair(
                p -> {
                  Random r = new Random(SEED * 37 + p);
                  List<Tuple2<Integer, String>> out = new ArrayList<>(GBK_PER_MAP);
                  for (int i = 0; i < GBK_PER_MAP; i++) {
                    out.add(new Tuple2<>(r.nextInt(GBK_KEYS), "v" + p + "-" + i + "-" + r.nextInt(1000)));
                  }
                  return out.iterator();
                });
    List<Tuple2<Integer, List<String>>> groups =
        pairs
            .groupByKey(12)
            .mapValues(
                vs -> {
                  List<String> l = new ArrayList<>();
                  vs.forEach(l::add);
                  Collections.sort(l);
                  return l;
                })
            .collect();
    TreeMap<Integer, List<String>> out = new TreeMap<>();
    for (Tuple2<Integer, List<String>> g : groups) {
      if (out.put(g._1(), g._2()) != null) {
        throw new AssertionError("groupByKey produced key " + g._1() + " twice");
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- repartition

  static final int REP_MAPS = 12;
  static final int REP_PER_MAP = 30_000;
  static final int REP_PARTITIONS = 20;

  /**
   * repartition(20) of 360k strings of 10..200 chars. Returns each output partition's contents,
   * sorted (RDD.repartition places elements by a per-map-task seeded round robin, so the multiset
   * of every output partition is deterministic too).
   */
  public static List<List<String>> repartition(SparkSession spark) {
    JavaRDD<String> in =
        jsc(spark)
            .parallelize(range(REP_MAPS), REP_MAPS)
            .flatMap(
                p -> {
                  Random r = new Random(SEED * 41 + p);
                  List<String> out = new ArrayList<>(REP_PER_MAP);
                  for (int i = 0; i < REP_PER_MAP; i++) {
                    out.add(randomString(r, 10 + r.nextInt(191)));
                  }
                  return out.iterator();
                });
    List<Tuple2<Integer, List<String>>> parts =
        in.repartition(REP_PARTITIONS)
            .mapPartitionsWithIndex(
                (idx, it) -> {
                  List<String> l = new ArrayList<>();
                  it.forEachRemaining(l::add);
                  Collections.sort(l);
                  return Collections.singletonList(new Tuple2<>(idx, l)).iterator();
                },
                true)
            .collect();
    List<List<String>> out = new ArrayList<>();
    for (int i = 0; i < parts.size(); i++) {
      if (parts.get(i)._1() != i) {
        throw new AssertionError("partition " + parts.get(i)._1() + " at position " + i);
      }
      out.add(parts.get(i)._2());
    }
    return out;
  }

  static String randomString(Random r, int len) {
    char[] c = new char[len];
    for (int i = 0; i < len; i++) {
      c[i] = (char) ('a' + r.nextInt(26));
    }
    return new String(c);
  }

  // ---------------------------------------------------------------- sortByKey

  static final int SORT_MAPS = 8;
  static final int SORT_PER_MAP = 50_000;

  /** sortByKey(ascending, 10) over 400k distinct long keys: the collected order is exact. */
  public static List<String> sortByKey(SparkSession spark) {
    JavaPairRDD<Long, String> pairs =
        jsc(spark)
            .parallelize(range(SORT_MAPS), SORT_MAPS)
            .flatMapToPair(
                p -> {
                  List<Tuple2<Long, String>> out = new ArrayList<>(SORT_PER_MAP);
                  for (int i = 0; i < SORT_PER_MAP; i++) {
                    long n = (long) p * SORT_PER_MAP + i;
                    // odd multiplier: a bijection on longs, so keys are distinct and scattered
                    out.add(new Tuple2<>(n * 0x9E3779B97F4A7C15L, "r" + n));
                  }
                  return out.iterator();
                });
    List<Tuple2<Long, String>> sorted = pairs.sortByKey(true, 10).collect();
    List<String> out = new ArrayList<>(sorted.size());
    long prev = Long.MIN_VALUE;
    for (int i = 0; i < sorted.size(); i++) {
      Tuple2<Long, String> t = sorted.get(i);
      if (i > 0 && t._1() <= prev) {
        throw new AssertionError("sortByKey output not increasing at " + i + ": " + prev + " then " + t._1());
      }
      prev = t._1();
      out.add(t._1() + "=" + t._2());
    }
    if (out.size() != SORT_MAPS * SORT_PER_MAP) {
      throw new AssertionError("sortByKey returned " + out.size() + " records");
    }
    return out;
  }

  // ---------------------------------------------------------------- SQL join + aggregation

  /**
   * Join of two generated DataFrames (sort-merge: broadcast joins are switched off so both sides
   * are shuffled) followed by a groupBy aggregation; AQE stays on (Spark's default), so reducers
   * read coalesced partition ranges. Returns the rows, ordered by region, as strings.
   */
  public static List<String> sqlJoinAggregate(SparkSession spark) {
    spark.conf().set("spark.sql.autoBroadcastJoinThreshold", "-1");
    if (!spark.conf().get("spark.sql.adaptive.enabled").equals("true")) {
      throw new AssertionError("AQE expected on");
    }
    Dataset<Row> orders =
        spark
            .range(0, 1_000_000, 1, 8)
            .selectExpr(
                "id AS order_id",
                "CAST((id * 2654435761) % 50000 AS BIGINT) AS cust_id",
                "CAST((id * 7919) % 1000 AS INT) AS amount",
                "concat('order-', id) AS note");
    Dataset<Row> customers =
        spark
            .range(0, 60_000, 1, 4)
            .selectExpr("id AS cust_id", "CAST(id % 997 AS INT) AS region", "concat('customer-', id) AS name");
    Dataset<Row> result =
        orders
            .join(customers, "cust_id")
            .groupBy(col("region"))
            .agg(
                count("*").as("orders"),
                sum("amount").as("total"),
                countDistinct("cust_id").as("customers"),
                max("note").as("max_note"),
                min("name").as("min_name"))
            .orderBy("region");
    List<String> rows = result.collectAsList().stream().map(Row::toString).collect(Collectors.toList());
    if (rows.size() != 997) {
      throw new AssertionError("expected 997 regions, got " + rows.size());
    }
    return rows; // ordered by region (distinct), so the order is exact

  }

  // ---------------------------------------------------------------- Celeborn's IT job shapes
  // The jobs Celeborn's own Spark ITs compare with and without Celeborn (CelebornHashSuite,
  // SparkTestBase: combine, groupBy + sortByKey, repartition + reduceByKey, SQL), larger.

  static final int CBK_MAPS = 12;
  static final int CBK_PER_MAP = 100_000;
  static final int CBK_KEYS = 30_000;

  /**
   * combineByKey over 1.2M (string key, int) records into (count, sum, min, max) per key, 9
   * reducers (map-side combine with separate createCombiner / mergeValue / mergeCombiners).
   */
  public static TreeMap<String, Tuple4<Long, Long, Integer, Integer>> combineByKey(SparkSession spark) {
    JavaPairRDD<String, Integer> pairs =
        jsc(spark)
            .parallelize(range(CBK_MAPS), CBK_MAPS)
            .flatMapToPair(
                p -> {
                  Random r = new Random(SEED * 53 + p);
                  List<Tuple2<String, Integer>> out = new ArrayList<>(CBK_PER_MAP);
                  for (int i = 0; i < CBK_PER_MAP; i++) {
                    out.add(new Tuple2<>("key-" + r.nextInt(CBK_KEYS), r.nextInt(2_000_000) - 1_000_000));
                  }
                  return out.iterator();
                });
    Map<String, Tuple4<Long, Long, Integer, Integer>> m =
        pairs
            .combineByKey(
                v -> new Tuple4<>(1L, (long) v, v, v),
                (acc, v) -> new Tuple4<>(acc._1() + 1, acc._2() + v, Math.min(acc._3(), v), Math.max(acc._4(), v)),
                (a, b) ->
                    new Tuple4<>(
                        a._1() + b._1(), a._2() + b._2(), Math.min(a._3(), b._3()), Math.max(a._4(), b._4())),
                9)
            .collectAsMap();
    TreeMap<String, Tuple4<Long, Long, Integer, Integer>> out = new TreeMap<>(m);
    long n = out.values().stream().mapToLong(Tuple4::_1).sum();
    if (n != (long) CBK_MAPS * CBK_PER_MAP) {
      throw new AssertionError("combineByKey counted " + n + " records");
    }
    return out;
  }

  static final int GSB_MAPS = 16;
  static final int GSB_PER_MAP = 20_000;
  static final int GSB_KEYS = 4_000;

  /**
   * groupByKey(7) then sortByKey(ascending, 5): two shuffles, the second a range-partitioned
   * sort. Returns "key:size:sorted values" in the collected order, which must be ascending.
   */
  public static List<String> groupByKeySortByKey(SparkSession spark) {
    JavaPairRDD<Integer, String> pairs =
        jsc(spark)
            .parallelize(range(GSB_MAPS), GSB_MAPS)
            .flatMapToPair(
                p -> {
                  Random r = new Random(SEED * 59 + p);
                  List<Tuple2<Integer, String>> out = new ArrayList<>(GSB_PER_MAP);
                  for (int i = 0; i < GSB_PER_MAP; i++) {
                    out.add(new Tuple2<>(r.nextInt(GSB_KEYS) * 7919 % 100_003, "v" + p + "." + i + "." + r.nextInt(100)));
                  }
                  return out.iterator();
                });
    List<Tuple2<Integer, String>> sorted =
        pairs
            .groupByKey(7)
            .mapValues(
                vs -> {
                  List<String> l = new ArrayList<>();
                  vs.forEach(l::add);
                  Collections.sort(l);
                  return l.size() + ":" + String.join(",", l);
                })
            .sortByKey(true, 5)
            .collect();
    List<String> out = new ArrayList<>(sorted.size());
    int prev = Integer.MIN_VALUE;
    long values = 0;
    for (int i = 0; i < sorted.size(); i++) {
      Tuple2<Integer, String> t = sorted.get(i);
      if (i > 0 && t._1() <= prev) {
        throw new AssertionError("groupByKey+sortByKey output not increasing at " + i + ": " + prev + " then " + t._1());
      }
      prev = t._1();
      values += Long.parseLong(t._2().substring(0, t._2().indexOf(':')));
      out.add(t._1() + ":" + t._2());
    }
    if (values != (long) GSB_MAPS * GSB_PER_MAP) {
      throw new AssertionError("groupByKey+sortByKey returned " + values + " values");
    }
    return out;
  }

  static final int RRB_MAPS = 10;
  static final int RRB_PER_MAP = 60_000;
  static final int RRB_KEYS = 50_000;

  /**
   * repartition(13) (round robin, no map-side combine) then reduceByKey(6): key -> sum of
   * values. Two shuffles.
   */
  public static TreeMap<Long, Long> repartitionReduceByKey(SparkSession spark) {
    JavaPairRDD<Long, Long> pairs =
        jsc(spark)
            .parallelize(range(RRB_MAPS), RRB_MAPS)
            .flatMapToPair(
                p -> {
                  Random r = new Random(SEED * 61 + p);
                  List<Tuple2<Long, Long>> out = new ArrayList<>(RRB_PER_MAP);
                  for (int i = 0; i < RRB_PER_MAP; i++) {
                    out.add(new Tuple2<>((long) r.nextInt(RRB_KEYS), r.nextLong() >> 16));
                  }
                  return out.iterator();
                });
    Map<Long, Long> m = pairs.repartition(13).reduceByKey(Long::sum, 6).collectAsMap();
    return new TreeMap<>(m);
  }

  // ---------------------------------------------------------------- large

  static final int LARGE_MAPS = 25;
  static final int LARGE_PARTITIONS = 50;
  static final int LARGE_PAYLOAD = 100;

  /** Records for the large job: {@code switchyard.large.records}, default 5M (about 550 MB shuffled). */
  public static long largeRecords() {
    return Long.getLong("switchyard.large.records", 5_000_000L);
  }

  /** Per output partition: count and sum of record hashes. */
  public record PartitionDigest(long count, long hashSum) {}

  /**
   * {@code records} (key: random long, value: 100 random bytes, all from fixed seeds) hash-
   * partitioned into 50 partitions; returns (count, sum of hashes) of every output partition, so
   * a record that is lost, duplicated, corrupted or delivered to the wrong partition shows up.
   * Random payloads do not compress, so the shuffle carries about 110 bytes per record.
   */
  public static List<PartitionDigest> largeShuffle(SparkSession spark, long records) {
    return largeShuffle(spark, records, LARGE_PARTITIONS);
  }

  /** The large job's records hash-partitioned into {@code partitions} reduce partitions. */
  public static List<PartitionDigest> largeShuffle(SparkSession spark, long records, int partitions) {
    final long perMap = (records + LARGE_MAPS - 1) / LARGE_MAPS;
    return digestShuffle(
        spark,
        "large job",
        records,
        partitions,
        p -> new RecordGenerator(SEED * 43 + p, Math.max(0, Math.min(perMap, records - p * perMap)), 0));
  }

  /**
   * The large job's shuffle used by two Spark jobs: the first (a count) runs the map stage and
   * reads every partition once; then {@code between} runs (a test kills a node there); the second
   * reuses the map output (its map stage is skipped) and reads every partition again. Returns the
   * second job's (count, hashSum) per partition, checked to add up to {@code records}.
   */
  public static List<PartitionDigest> reusedShuffle(SparkSession spark, long records, Runnable between) {
    final long perMap = (records + LARGE_MAPS - 1) / LARGE_MAPS;
    org.apache.spark.api.java.JavaPairRDD<Long, byte[]> shuffled =
        jsc(spark)
            .parallelize(range(LARGE_MAPS), LARGE_MAPS)
            .flatMapToPair(p -> new RecordGenerator(SEED * 43 + p, Math.max(0, Math.min(perMap, records - p * perMap)), 0))
            .partitionBy(new HashPartitioner(LARGE_PARTITIONS));
    long first = shuffled.count();
    if (first != records) {
      throw new AssertionError("reused shuffle: first job counted " + first + " of " + records);
    }
    between.run();
    return digests(shuffled, "reused shuffle, second job", records);
  }

  /**
   * {@code LARGE_MAPS} map tasks of records from {@code generator}, hash-partitioned into
   * {@code LARGE_PARTITIONS}; (count, sum of hashes) per output partition, checked to add up to
   * {@code records}.
   */
  private static List<PartitionDigest> digestShuffle(
      SparkSession spark,
      String name,
      long records,
      int partitions,
      org.apache.spark.api.java.function.PairFlatMapFunction<Integer, Long, byte[]> generator) {
    return digests(
        jsc(spark)
            .parallelize(range(LARGE_MAPS), LARGE_MAPS)
            .flatMapToPair(generator)
            .partitionBy(new HashPartitioner(partitions)),
        name,
        records);
  }

  /**
   * (count, sum of record hashes) of every partition of {@code shuffled}, in partition order,
   * checked to add up to {@code records}.
   */
  private static List<PartitionDigest> digests(
      org.apache.spark.api.java.JavaPairRDD<Long, byte[]> shuffled, String name, long records) {
    // (partition, count, hashSum); Spark's Kryo (4.x) cannot serialize Java records, so the
    // record type is only built on the driver.
    List<Tuple3<Integer, Long, Long>> parts =
        shuffled
            .mapPartitionsWithIndex(
                (idx, it) -> {
                  long n = 0;
                  long h = 0;
                  while (it.hasNext()) {
                    Tuple2<Long, byte[]> t = it.next();
                    n++;
                    h += recordHash(t._1(), t._2());
                  }
                  return Collections.singletonList(new Tuple3<>(idx, n, h)).iterator();
                },
                true)
            .collect();
    List<PartitionDigest> out = new ArrayList<>();
    long total = 0;
    for (int i = 0; i < parts.size(); i++) {
      if (parts.get(i)._1() != i) {
        throw new AssertionError("partition " + parts.get(i)._1() + " at position " + i);
      }
      out.add(new PartitionDigest(parts.get(i)._2(), parts.get(i)._3()));
      total += parts.get(i)._2();
    }
    if (total != records) {
      throw new AssertionError(name + ": " + total + " records after the shuffle, " + records + " before");
    }
    return out;
  }

  // ---------------------------------------------------------------- skewed

  /** The hot key of the skewed job. */
  static final long HOT_KEY = 0x5EE5L;

  /** Records for the skewed job: {@code switchyard.cold.records}, default 5M (about 530 MB shuffled). */
  public static long skewedRecords() {
    return Long.getLong("switchyard.cold.records", 5_000_000L);
  }

  /** Share of the skewed job's records that carry {@link #HOT_KEY}: {@code switchyard.cold.hotFraction}, default 0.8. */
  public static double hotFraction() {
    return Double.parseDouble(System.getProperty("switchyard.cold.hotFraction", "0.8"));
  }

  /** The output partition of {@link #HOT_KEY} in {@link #skewedShuffle}. */
  public static int hotPartition() {
    return new HashPartitioner(LARGE_PARTITIONS).getPartition(HOT_KEY);
  }

  /**
   * The large job's records, except that a share {@code hotFraction} of them (chosen from fixed
   * seeds) carry one key, {@link #HOT_KEY}, so one output partition ({@link #hotPartition()})
   * receives most of the shuffle: with the defaults about 80% of 520 MB. Returns (count, sum of
   * hashes) per output partition, as {@link #largeShuffle}.
   */
  public static List<PartitionDigest> skewedShuffle(SparkSession spark, long records, double hotFraction) {
    final long perMap = (records + LARGE_MAPS - 1) / LARGE_MAPS;
    return digestShuffle(
        spark,
        "skewed job",
        records,
        LARGE_PARTITIONS,
        p ->
            new RecordGenerator(
                SEED * 47 + p, Math.max(0, Math.min(perMap, records - p * perMap)), hotFraction));
  }

  static long recordHash(long key, byte[] payload) {
    long h = key * 0x9E3779B97F4A7C15L + Arrays.hashCode(payload) * 0xC2B2AE3D27D4EB4FL + payload.length;
    // murmur3 fmix64
    h ^= h >>> 33;
    h *= 0xff51afd7ed558ccdL;
    h ^= h >>> 33;
    h *= 0xc4ceb9fe1a85ec53L;
    h ^= h >>> 33;
    return h;
  }

  /**
   * Lazily generates one map task's records, so a task never holds them all: random keys and
   * 100-byte random payloads from {@code seed}, except that a share {@code hotFraction} of the
   * records carry {@link #HOT_KEY} (the skewed job).
   */
  static final class RecordGenerator implements Iterator<Tuple2<Long, byte[]>> {
    private final SplittableRandom r;
    private final long n;
    private final double hotFraction;
    private long i;

    RecordGenerator(long seed, long n, double hotFraction) {
      this.r = new SplittableRandom(seed);
      this.n = n;
      this.hotFraction = hotFraction;
    }

    @Override
    public boolean hasNext() {
      return i < n;
    }

    @Override
    public Tuple2<Long, byte[]> next() {
      if (i >= n) {
        throw new NoSuchElementException();
      }
      i++;
      byte[] payload = new byte[LARGE_PAYLOAD];
      for (int j = 0; j < LARGE_PAYLOAD; j += 8) {
        long v = r.nextLong();
        for (int k = 0; k < 8 && j + k < LARGE_PAYLOAD; k++) {
          payload[j + k] = (byte) (v >>> (8 * k));
        }
      }
      long key = hotFraction > 0 && r.nextDouble() < hotFraction ? HOT_KEY : r.nextLong();
      return new Tuple2<>(key, payload);
    }
  }
}
