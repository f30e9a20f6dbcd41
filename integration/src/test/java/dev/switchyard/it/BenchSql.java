package dev.switchyard.it;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * The SQL workload of {@link SparkBench}: a TPC-DS-like star schema generated from fixed
 * expressions (store and web sales facts; date, item, customer and store dimensions; money as
 * DECIMAL(7,2), so that results are exact whatever order a shuffle delivers rows in), written
 * once as Parquet under {@code switchyard.bench.data} (default {@code target/bench-data}), and
 * queries in the style of TPC-DS (joins of facts with dimensions, aggregations, windows,
 * year-over-year self joins, unions, distinct counts). With broadcast joins off and 16 shuffle
 * partitions each query runs several small exchanges, so the fixed cost of every shuffle
 * (registration, assignment or slot requests, commits, the first read's round trips) is what
 * the workload measures.
 */
final class BenchSql {

  private BenchSql() {}

  /** store_sales rows; web_sales has half as many (about TPC-DS at scale 0.5). */
  static long factRows() {
    return Long.getLong("switchyard.bench.sqlRows", 1_500_000L);
  }

  static Path dataDir() {
    // v2: prices and profits are DECIMAL(7,2), as in TPC-DS: sums are exact, so
    // a result does not depend on the order a shuffle delivers rows in.
    return Paths.get(System.getProperty("switchyard.bench.data", "target/bench-data")).toAbsolutePath()
        .resolve("v2-rows-" + factRows());
  }

  static final Map<String, String> QUERIES = queries();

  private static Map<String, String> queries() {
    Map<String, String> q = new LinkedHashMap<>();
    q.put("q03_brand_by_year",
        "SELECT d_year, i_brand, SUM(ss_sales_price * ss_quantity) AS sales FROM store_sales"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk JOIN item ON ss_item_sk = i_item_sk"
            + " WHERE d_moy = 11 GROUP BY d_year, i_brand ORDER BY d_year, sales DESC LIMIT 100");
    q.put("q07_item_averages",
        "SELECT i_item_sk, AVG(ss_quantity) q, AVG(ss_sales_price) p, AVG(ss_net_profit) n FROM store_sales"
            + " JOIN customer ON ss_customer_sk = c_customer_sk JOIN item ON ss_item_sk = i_item_sk"
            + " WHERE c_birth_year BETWEEN 1960 AND 1980 GROUP BY i_item_sk ORDER BY i_item_sk LIMIT 100");
    q.put("q12_web_category_share",
        "SELECT i_category, i_class, SUM(ws_sales_price) rev,"
            + " SUM(ws_sales_price) * 100 / SUM(SUM(ws_sales_price)) OVER (PARTITION BY i_class) share"
            + " FROM web_sales JOIN item ON ws_item_sk = i_item_sk JOIN date_dim ON ws_sold_date_sk = d_date_sk"
            + " WHERE d_year = 2001 GROUP BY i_category, i_class");
    q.put("q19_brand_by_state",
        "SELECT i_brand, s_state, SUM(ss_net_profit) p FROM store_sales JOIN item ON ss_item_sk = i_item_sk"
            + " JOIN store ON ss_store_sk = s_store_sk JOIN customer ON ss_customer_sk = c_customer_sk"
            + " WHERE c_state <> s_state GROUP BY i_brand, s_state ORDER BY p DESC LIMIT 100");
    q.put("q27_state_item_stats",
        "SELECT s_state, i_category, AVG(ss_quantity), AVG(ss_sales_price), COUNT(*) FROM store_sales"
            + " JOIN store ON ss_store_sk = s_store_sk JOIN item ON ss_item_sk = i_item_sk"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_year = 2000"
            + " GROUP BY ROLLUP(s_state, i_category)");
    q.put("q34_frequent_buyers",
        "SELECT c_customer_sk, c_state, cnt FROM (SELECT ss_customer_sk, ss_store_sk, COUNT(*) cnt"
            + " FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_dow IN (0, 6)"
            + " GROUP BY ss_customer_sk, ss_store_sk) t JOIN customer ON ss_customer_sk = c_customer_sk"
            + " WHERE cnt >= 3 ORDER BY cnt DESC, c_customer_sk LIMIT 200");
    q.put("q38_both_channels",
        "SELECT COUNT(*) FROM (SELECT DISTINCT ss_customer_sk c, d_year y FROM store_sales"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk INTERSECT SELECT DISTINCT ws_customer_sk, d_year"
            + " FROM web_sales JOIN date_dim ON ws_sold_date_sk = d_date_sk)");
    q.put("q42_category_month",
        "SELECT d_year, d_moy, i_category, SUM(ss_sales_price) FROM store_sales"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk JOIN item ON ss_item_sk = i_item_sk"
            + " GROUP BY d_year, d_moy, i_category");
    q.put("q46_city_trips",
        "SELECT c_customer_sk, s_state, SUM(ss_net_profit), COUNT(DISTINCT ss_sold_date_sk) FROM store_sales"
            + " JOIN customer ON ss_customer_sk = c_customer_sk JOIN store ON ss_store_sk = s_store_sk"
            + " GROUP BY c_customer_sk, s_state HAVING COUNT(*) > 4");
    q.put("q47_monthly_deviation",
        "SELECT * FROM (SELECT i_category, s_store_sk, d_year, d_moy, SUM(ss_sales_price) m,"
            + " AVG(SUM(ss_sales_price)) OVER (PARTITION BY i_category, s_store_sk, d_year) a"
            + " FROM store_sales JOIN item ON ss_item_sk = i_item_sk JOIN store ON ss_store_sk = s_store_sk"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk GROUP BY i_category, s_store_sk, d_year, d_moy) t"
            + " WHERE ABS(m - a) > 0.1 * a");
    q.put("q52_brand_month",
        "SELECT d_year, i_brand, SUM(ss_sales_price) FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk"
            + " JOIN item ON ss_item_sk = i_item_sk WHERE d_moy = 12 GROUP BY d_year, i_brand");
    q.put("q55_brand_revenue",
        "SELECT i_brand, SUM(ss_sales_price) r FROM store_sales JOIN item ON ss_item_sk = i_item_sk"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_moy = 11 AND d_year = 1999"
            + " GROUP BY i_brand ORDER BY r DESC LIMIT 100");
    q.put("q59_weekly_ratio",
        "SELECT a.s, a.w, a.sales / b.sales FROM (SELECT ss_store_sk s, FLOOR(d_date_sk / 7) w, SUM(ss_sales_price) sales"
            + " FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk GROUP BY 1, 2) a JOIN"
            + " (SELECT ss_store_sk s, FLOOR(d_date_sk / 7) w, SUM(ss_sales_price) sales FROM store_sales"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk GROUP BY 1, 2) b ON a.s = b.s AND a.w = b.w + 52");
    q.put("q63_manager_month",
        "SELECT * FROM (SELECT i_manager_id, d_moy, SUM(ss_sales_price) s,"
            + " AVG(SUM(ss_sales_price)) OVER (PARTITION BY i_manager_id) a FROM store_sales"
            + " JOIN item ON ss_item_sk = i_item_sk JOIN date_dim ON ss_sold_date_sk = d_date_sk"
            + " GROUP BY i_manager_id, d_moy) t WHERE s > 1.05 * a");
    q.put("q65_low_items",
        "SELECT sc.s, sc.i, sc.r FROM (SELECT ss_store_sk s, ss_item_sk i, SUM(ss_sales_price) r FROM store_sales"
            + " GROUP BY 1, 2) sc JOIN (SELECT s, AVG(r) ave FROM (SELECT ss_store_sk s, ss_item_sk i,"
            + " SUM(ss_sales_price) r FROM store_sales GROUP BY 1, 2) x GROUP BY s) sb ON sc.s = sb.s"
            + " WHERE sc.r <= 0.1 * sb.ave");
    q.put("q68_customer_profit",
        "SELECT c_customer_sk, SUM(ss_net_profit) FROM store_sales JOIN customer ON ss_customer_sk = c_customer_sk"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk WHERE d_dow = 1 GROUP BY c_customer_sk");
    q.put("q73_basket_counts",
        "SELECT cnt, COUNT(*) FROM (SELECT ss_customer_sk, ss_sold_date_sk, COUNT(*) cnt FROM store_sales"
            + " GROUP BY 1, 2) GROUP BY cnt");
    q.put("q76_channels_union",
        "SELECT channel, i_category, COUNT(*), SUM(p) FROM (SELECT 'store' channel, ss_item_sk it, ss_sales_price p"
            + " FROM store_sales UNION ALL SELECT 'web', ws_item_sk, ws_sales_price FROM web_sales) s"
            + " JOIN item ON it = i_item_sk GROUP BY channel, i_category");
    q.put("q79_store_profit",
        "SELECT c_customer_sk, ss_store_sk, SUM(ss_net_profit) FROM store_sales"
            + " JOIN customer ON ss_customer_sk = c_customer_sk JOIN date_dim ON ss_sold_date_sk = d_date_sk"
            + " WHERE d_dow = 1 AND c_birth_year > 1970 GROUP BY 1, 2");
    q.put("q87_store_only",
        "SELECT COUNT(*) FROM (SELECT DISTINCT ss_customer_sk, d_year FROM store_sales"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk EXCEPT SELECT DISTINCT ws_customer_sk, d_year"
            + " FROM web_sales JOIN date_dim ON ws_sold_date_sk = d_date_sk)");
    q.put("q89_class_deviation",
        "SELECT * FROM (SELECT i_category, i_class, s_store_sk, d_moy, SUM(ss_sales_price) s,"
            + " AVG(SUM(ss_sales_price)) OVER (PARTITION BY i_category, s_store_sk) a FROM store_sales"
            + " JOIN item ON ss_item_sk = i_item_sk JOIN store ON ss_store_sk = s_store_sk"
            + " JOIN date_dim ON ss_sold_date_sk = d_date_sk GROUP BY 1, 2, 3, 4) t WHERE s < 0.9 * a");
    q.put("q96_count_hours",
        "SELECT COUNT(*) FROM store_sales JOIN store ON ss_store_sk = s_store_sk"
            + " JOIN customer ON ss_customer_sk = c_customer_sk WHERE ss_quantity BETWEEN 20 AND 40");
    q.put("q97_overlap",
        "SELECT SUM(IF(s IS NOT NULL AND w IS NULL, 1, 0)), SUM(IF(s IS NULL AND w IS NOT NULL, 1, 0)),"
            + " SUM(IF(s IS NOT NULL AND w IS NOT NULL, 1, 0)) FROM (SELECT ss_customer_sk s, ss_item_sk si"
            + " FROM store_sales GROUP BY 1, 2) a FULL OUTER JOIN (SELECT ws_customer_sk w, ws_item_sk wi"
            + " FROM web_sales GROUP BY 1, 2) b ON s = w AND si = wi");
    q.put("q98_item_share",
        "SELECT i_item_sk, i_class, SUM(ss_sales_price) r,"
            + " SUM(ss_sales_price) * 100 / SUM(SUM(ss_sales_price)) OVER (PARTITION BY i_class) share"
            + " FROM store_sales JOIN item ON ss_item_sk = i_item_sk GROUP BY i_item_sk, i_class");
    return q;
  }

  /** Writes the tables as Parquet unless they exist (a marker file says they are whole). */
  static void prepare(SparkSession spark) throws Exception {
    Path dir = dataDir();
    if (Files.exists(dir.resolve("_complete"))) {
      return;
    }
    long n = factRows();
    spark.sql("SELECT id d_date_sk, 1998 + CAST(id / 365 AS INT) d_year, CAST(id % 365 / 31 AS INT) + 1 d_moy,"
            + " CAST(id % 7 AS INT) d_dow FROM range(1826)")
        .write().mode("overwrite").parquet(dir.resolve("date_dim").toString());
    spark.sql("SELECT id i_item_sk, CONCAT('cat', id % 10) i_category, CONCAT('class', id % 37) i_class,"
            + " CONCAT('brand', id % 211) i_brand, CAST(id % 97 AS INT) i_manager_id,"
            + " CAST(1 + (id * 7919 % 10000) / 100.0 AS DECIMAL(7,2)) i_price FROM range(18000)")
        .write().mode("overwrite").parquet(dir.resolve("item").toString());
    spark.sql("SELECT id c_customer_sk, CONCAT('S', id % 50) c_state, CAST(1930 + id % 70 AS INT) c_birth_year"
            + " FROM range(50000)")
        .write().mode("overwrite").parquet(dir.resolve("customer").toString());
    spark.sql("SELECT id s_store_sk, CONCAT('S', id * 7 % 50) s_state FROM range(60)")
        .write().mode("overwrite").parquet(dir.resolve("store").toString());
    spark.sql("SELECT pmod(xxhash64(id, 1), 1826) ss_sold_date_sk, pmod(xxhash64(id, 2), 18000) ss_item_sk,"
            + " pmod(xxhash64(id, 3), 50000) ss_customer_sk, pmod(xxhash64(id, 4), 60) ss_store_sk,"
            + " CAST(pmod(xxhash64(id, 5), 100) + 1 AS INT) ss_quantity,"
            + " CAST(pmod(xxhash64(id, 6), 20000) / 100.0 AS DECIMAL(7,2)) ss_sales_price,"
            + " CAST((pmod(xxhash64(id, 7), 20000) - 8000) / 100.0 AS DECIMAL(7,2)) ss_net_profit"
            + " FROM range(" + n + ")")
        .repartition(8).write().mode("overwrite").parquet(dir.resolve("store_sales").toString());
    spark.sql("SELECT pmod(xxhash64(id, 11), 1826) ws_sold_date_sk, pmod(xxhash64(id, 12), 18000) ws_item_sk,"
            + " pmod(xxhash64(id, 13), 50000) ws_customer_sk,"
            + " CAST(pmod(xxhash64(id, 16), 30000) / 100.0 AS DECIMAL(7,2)) ws_sales_price FROM range(" + (n / 2) + ")")
        .repartition(4).write().mode("overwrite").parquet(dir.resolve("web_sales").toString());
    Files.writeString(dir.resolve("_complete"), "rows=" + n + "\n");
  }

  /**
   * Runs every query once; adds {@code query.<name>_ms=<ms>} to {@code lines} and returns the
   * sum of every query's result checksum.
   */
  static long run(SparkSession spark, List<String> lines) {
    Path dir = dataDir();
    if (!Files.exists(dir.resolve("_complete"))) {
      throw new IllegalStateException("no benchmark tables in " + dir + ": run the sql-prepare workload first");
    }
    for (String t : List.of("date_dim", "item", "customer", "store", "store_sales", "web_sales")) {
      spark.read().parquet(dir.resolve(t).toString()).createOrReplaceTempView(t);
    }
    long checksum = 0;
    for (Map.Entry<String, String> q : QUERIES.entrySet()) {
      long start = System.nanoTime();
      long sum = 0;
      for (Row r : spark.sql(q.getValue()).collectAsList()) {
        sum += SparkBench.rowHash(r);
      }
      lines.add("query." + q.getKey() + "_ms=" + (System.nanoTime() - start) / 1_000_000);
      lines.add("sum." + q.getKey() + "=" + Long.toHexString(sum));
      checksum = checksum * 31 + sum;
    }
    return checksum;
  }
}
