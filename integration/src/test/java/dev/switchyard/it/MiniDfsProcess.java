package dev.switchyard.it;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.StringReader;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Properties;

/**
 * A real HDFS in a child JVM: {@code integration/minidfs} ({@code MiniDfsMain}: a MiniDFSCluster
 * of Hadoop 3.4.2, one namenode and one datanode on 127.0.0.1, free ports, permissions off).
 * Spark 3.5 brings its own Hadoop client jars, so HDFS never runs inside the test JVM. Listings
 * go over WebHDFS ({@code LISTSTATUS} on the namenode's HTTP port), independent of Switchyard's
 * own HDFS client.
 *
 * <p>System properties: {@code switchyard.minidfs.classpath} (file with the runtime classpath,
 * default {@code minidfs/target/classpath.txt}; written by {@code mvn -f minidfs/pom.xml package},
 * which the integration pom's {@code cold} profile runs), {@code switchyard.minidfs.classes}
 * (default {@code minidfs/target/classes}), {@code switchyard.minidfs.heap} (default {@code 768m}).
 */
final class MiniDfsProcess extends ChildService implements ColdStore {

  static final String ROOT = "/switchyard-it";

  private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
  private final ObjectMapper json = new ObjectMapper();
  private String nameNode;
  private String httpAddress;

  private MiniDfsProcess(Path dir) {
    super("minidfs", dir.resolve("minidfs.log"));
  }

  /** Starts MiniDFS with its directories under {@code dir}; waits until the datanode is up. */
  static MiniDfsProcess start(Path dir) throws IOException {
    List<String> cmd = command(dir);
    MiniDfsProcess m = new MiniDfsProcess(dir);
    Path info = dir.resolve("minidfs.properties");
    Files.deleteIfExists(info);
    try {
      m.launch(cmd, dir, info, Duration.ofSeconds(180));
      Properties p = new Properties();
      p.load(new StringReader(Files.readString(info)));
      m.nameNode = require(p, "name_node");
      m.httpAddress = require(p, "http");
      System.out.printf("[minidfs] %s, WebHDFS http://%s, datanode %s%n", m.nameNode, m.httpAddress, p.getProperty("datanode"));
    } catch (IOException | RuntimeException e) {
      m.close();
      throw e;
    }
    return m;
  }

  private static String require(Properties p, String key) {
    String v = p.getProperty(key);
    if (v == null || v.isEmpty()) {
      throw new IllegalStateException("minidfs info file lacks " + key + ": " + p);
    }
    return v;
  }

  private static List<String> command(Path dir) throws IOException {
    Path cpFile = Paths.get(System.getProperty("switchyard.minidfs.classpath", "minidfs/target/classpath.txt"))
        .toAbsolutePath().normalize();
    Path classes = Paths.get(System.getProperty("switchyard.minidfs.classes", "minidfs/target/classes"))
        .toAbsolutePath().normalize();
    if (!Files.isRegularFile(cpFile) || !Files.isDirectory(classes.resolve("dev/switchyard/minidfs"))) {
      throw new IllegalStateException(
          "MiniDFS is not built: need " + cpFile + " and " + classes + ". Build it with"
              + " `mvn -f minidfs/pom.xml package` in integration/ (the pom's `cold` profile,"
              + " active with -Dshuffle.client=cold, does this before the tests).");
    }
    String java = Paths.get(System.getProperty("java.home"), "bin", "java").toString();
    List<String> cmd = new ArrayList<>();
    cmd.add(java);
    cmd.add("-Xmx" + System.getProperty("switchyard.minidfs.heap", "768m"));
    cmd.add("-Djava.net.preferIPv4Stack=true");
    // Hadoop 3.4 on Java 17: WebHDFS's JAXB (jersey 1) needs java.lang opened.
    for (String opt : System.getProperty("spark.java17.opens", "").trim().split("\\s+")) {
      if (opt.startsWith("--add-opens")) {
        cmd.add(opt);
      }
    }
    cmd.add("--add-opens=java.base/java.lang=ALL-UNNAMED");
    cmd.add("-cp");
    cmd.add(classes + ":" + Files.readString(cpFile).trim());
    cmd.add("dev.switchyard.minidfs.MiniDfsMain");
    cmd.add(dir.resolve("base").toString());
    cmd.add(dir.resolve("minidfs.properties").toString());
    return cmd;
  }

  @Override
  public String label() {
    return "hdfs";
  }

  String nameNode() {
    return nameNode;
  }

  static String rootOf(String run) {
    return ROOT + "/" + run;
  }

  @Override
  public String coldToml(String run, String hugePartitionThreshold) {
    return "[storage.cold]\n"
        + "service = \"hdfs\"\n"
        + "name_node = \"" + nameNode + "\"\n"
        + "root = \"" + rootOf(run) + "\"\n"
        + "huge_partition_threshold = \"" + hugePartitionThreshold + "\"\n";
  }

  /** Files below the run's root, walked with WebHDFS LISTSTATUS. */
  @Override
  public Listing list(String run) {
    int n = 0;
    long bytes = 0;
    List<String> sample = new ArrayList<>();
    Deque<String> dirs = new ArrayDeque<>();
    dirs.add(rootOf(run));
    while (!dirs.isEmpty()) {
      String dir = dirs.poll();
      JsonNode statuses = listStatus(dir);
      if (statuses == null) {
        continue; // gone (or never made)
      }
      for (JsonNode st : statuses) {
        String child = dir + "/" + st.path("pathSuffix").asText();
        if ("DIRECTORY".equals(st.path("type").asText())) {
          dirs.add(child);
        } else {
          n++;
          bytes += st.path("length").asLong();
          if (sample.size() < Listing.SAMPLE) {
            sample.add(child);
          }
        }
      }
    }
    return new Listing(n, bytes, sample);
  }

  /** The FileStatus array of a directory, or null if it does not exist. */
  private JsonNode listStatus(String dir) {
    String url = "http://" + httpAddress + "/webhdfs/v1" + encodePath(dir) + "?op=LISTSTATUS&user.name="
        + URLEncoder.encode(System.getProperty("user.name", "root"), StandardCharsets.UTF_8);
    try {
      HttpResponse<String> r = http.send(
          HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(10)).GET().build(),
          HttpResponse.BodyHandlers.ofString());
      if (r.statusCode() == 404) {
        return null;
      }
      if (r.statusCode() != 200) {
        throw new AssertionError("WebHDFS " + url + ": HTTP " + r.statusCode() + " " + Compare.abbrev(r.body()));
      }
      return json.readTree(r.body()).path("FileStatuses").path("FileStatus");
    } catch (IOException e) {
      throw new AssertionError("WebHDFS " + url + " failed", e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted", e);
    }
  }

  private static String encodePath(String path) {
    StringBuilder sb = new StringBuilder();
    for (String part : path.split("/")) {
      if (!part.isEmpty()) {
        sb.append('/').append(URLEncoder.encode(part, StandardCharsets.UTF_8).replace("+", "%20"));
      }
    }
    return sb.length() == 0 ? "/" : sb.toString();
  }
}
