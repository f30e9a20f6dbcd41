package dev.switchyard.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

/**
 * A real S3-protocol server in a child process: {@code storage/examples/s3_server.rs} (s3s-fs,
 * built with {@code cargo build -p switchyard-storage --example s3_server}) on a free
 * 127.0.0.1 port, with fixed test credentials and one bucket. s3s-fs keeps every object as a file
 * {@code <root>/<bucket>/<key>}, so a listing of that directory is the bucket's content.
 *
 * <p>System property {@code switchyard.s3server.bin}: the binary (default {@code
 * ../target/debug/examples/s3_server}).
 */
final class S3ServerProcess extends ChildService implements ColdStore {

  static final String BUCKET = "shuffle";
  static final String ACCESS_KEY = "switchyard-test";
  static final String SECRET_KEY = "switchyard-test-secret";

  private final Path root;
  private final Path dir;
  private String address;

  private S3ServerProcess(Path dir) {
    super("s3_server", dir.resolve("s3_server.log"));
    this.dir = dir;
    this.root = dir.resolve("root");
  }

  /** Starts the server over {@code dir}/root (logs and its address file in {@code dir}). */
  static S3ServerProcess start(Path dir) throws IOException {
    Files.createDirectories(dir);
    S3ServerProcess s = new S3ServerProcess(dir);
    try {
      s.run("127.0.0.1:0");
    } catch (IOException | RuntimeException e) {
      s.close();
      throw e;
    }
    System.out.printf("[s3_server] http://%s, bucket %s under %s%n", s.address, BUCKET, s.root);
    return s;
  }

  /**
   * Stops the server and starts it again on the same address and root: an outage of the service.
   * Its objects are still there afterwards, as s3s-fs keeps them as files.
   */
  void restart() throws IOException {
    close();
    run(address);
    System.out.printf("[s3_server] restarted on http://%s%n", address);
  }

  private void run(String listen) throws IOException {
    Path addressFile = dir.resolve("s3_server.address");
    Files.deleteIfExists(addressFile);
    launch(
        List.of(
            locateBinary().toString(),
            "--root", root.toString(),
            "--listen", listen,
            "--bucket", BUCKET,
            "--address-file", addressFile.toString(),
            "--exit-on-stdin-eof"),
        dir,
        addressFile,
        Duration.ofSeconds(30));
    address = Files.readString(addressFile).trim();
  }

  static Path locateBinary() {
    String prop = System.getProperty("switchyard.s3server.bin", "../target/debug/examples/s3_server");
    Path bin = Paths.get(prop).toAbsolutePath().normalize();
    if (!Files.isRegularFile(bin) || !Files.isExecutable(bin)) {
      throw new IllegalStateException(
          "the S3 test server is not built: no executable at " + bin + " (from -Dswitchyard.s3server.bin="
              + prop + "). Build it in the repository root with"
              + " `cargo build -p switchyard-storage --example s3_server`.");
    }
    return bin;
  }

  @Override
  public String label() {
    return "s3";
  }

  String endpoint() {
    return "http://" + address;
  }

  Path bucketDir() {
    return root.resolve(BUCKET);
  }

  static String prefixOf(String run) {
    return "it-" + run;
  }

  @Override
  public String coldToml(String run, String hugePartitionThreshold) {
    return "[storage.cold]\n"
        + "service = \"s3\"\n"
        + "bucket = \"" + BUCKET + "\"\n"
        + "endpoint = \"" + endpoint() + "\"\n"
        + "region = \"us-east-1\"\n"
        + "access_key_id = \"" + ACCESS_KEY + "\"\n"
        + "secret_access_key = \"" + SECRET_KEY + "\"\n"
        + "path_style = true\n"
        + "prefix = \"" + prefixOf(run) + "\"\n"
        + "huge_partition_threshold = \"" + hugePartitionThreshold + "\"\n";
  }

  /** Files below {@code <root>/<bucket>/<prefix>}: the run's objects. */
  @Override
  public Listing list(String run) {
    Path dir = bucketDir().resolve(prefixOf(run));
    if (!Files.isDirectory(dir)) {
      return new Listing(0, 0, List.of());
    }
    int n = 0;
    long bytes = 0;
    List<String> sample = new ArrayList<>();
    try (Stream<Path> s = Files.walk(dir)) {
      for (Path p : (Iterable<Path>) s::iterator) {
        try {
          if (Files.isRegularFile(p)) {
            n++;
            bytes += Files.size(p);
            if (sample.size() < Listing.SAMPLE) {
              sample.add(bucketDir().relativize(p).toString());
            }
          }
        } catch (IOException e) {
          // deleted while walking
        }
      }
    } catch (IOException | UncheckedIOException e) {
      // the directory went away while walking: count what was seen
    }
    return new Listing(n, bytes, sample);
  }
}
