package dev.switchyard.it;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * The JVM anchors of the Spark benchmark: a Uniffle coordinator and shuffle server, or a
 * Celeborn master and worker, started from their own jars on free loopback ports, so that a
 * bench round runs the same job against the upstream servers beside Switchyard. The jars are
 * built outside this repository from the upstream tags (see integration/bench-spark.sh); their
 * classpath comes from {@code JVM_UNIFFLE_CLASSPATH} or {@code JVM_CELEBORN_CLASSPATH}. Each
 * server gets the same memory as the Switchyard it is compared with: the Uniffle server's buffer,
 * the Celeborn worker's direct memory. {@link #close()} stops both by PID.
 */
final class JvmServers implements AutoCloseable {

  /** One JVM server process, ready once its port accepts connections. */
  static final class Server extends ChildService {
    Server(String name, Path log) {
      super(name, log);
    }

    void start(List<String> command, Path dir, int port) throws IOException {
      launch(command, dir, () -> accepts(port), "port " + port + " not accepting", Duration.ofSeconds(90));
    }
  }

  private final List<Server> servers = new ArrayList<>();
  private final String endpoint;

  private JvmServers(String endpoint) {
    this.endpoint = endpoint;
  }

  /** {@code kind} is {@code uniffle} or {@code celeborn}; {@code transport} is Uniffle's. */
  static JvmServers start(String kind, String transport, Path dir, String memory) throws IOException {
    String cp = classpath(kind);
    Files.createDirectories(dir);
    int[] ports = SwitchyardProcess.freeLoopbackPorts(6);
    JvmServers s = new JvmServers("127.0.0.1:" + ports[0]);
    try {
      if (kind.equals("uniffle")) {
        s.startUniffle(cp, transport, dir, memory, ports);
      } else {
        s.startCeleborn(cp, dir, memory, ports);
      }
    } catch (IOException | RuntimeException e) {
      s.close();
      throw e;
    }
    return s;
  }

  static String classpath(String kind) {
    String var = "JVM_" + kind.toUpperCase() + "_CLASSPATH";
    String cp = System.getenv(var);
    if (cp == null || cp.isBlank()) {
      throw new IllegalStateException("the jvm-" + kind + " bench path needs " + var
          + " (the upstream server's classpath; see integration/bench-spark.sh)");
    }
    return cp;
  }

  private void startUniffle(String cp, String transport, Path dir, String memory, int[] ports) throws IOException {
    Path coordinatorConf = write(dir.resolve("coordinator.conf"), List.of(
        "rss.rpc.server.port " + ports[0],
        "rss.jetty.http.port " + ports[1],
        "rss.coordinator.server.heartbeat.timeout 30000",
        "rss.coordinator.app.expired 60000"));
    Path serverConf = write(dir.resolve("server.conf"), List.of(
        "rss.rpc.server.port " + ports[2],
        "rss.jetty.http.port " + ports[3],
        "rss.server.netty.port " + ports[4],
        "rss.rpc.server.type " + transport,
        "rss.coordinator.quorum 127.0.0.1:" + ports[0],
        "rss.storage.type MEMORY_LOCALFILE",
        "rss.storage.basePath " + dir.resolve("data"),
        "rss.server.buffer.capacity " + memory.toLowerCase().replace("ib", "b"),
        "rss.server.read.buffer.capacity 256mb",
        "rss.server.heartbeat.interval 2000"));
    List<String> opens = List.of("-XX:MaxDirectMemorySize=2g", "-Dio.netty.tryReflectionSetAccessible=true",
        "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED");
    launch("jvm-uniffle-coordinator", dir, cp, "2g", opens,
        List.of("org.apache.uniffle.coordinator.CoordinatorServer", "--conf", coordinatorConf.toString()), ports[0]);
    launch("jvm-uniffle-server", dir, cp, "3g", opens,
        List.of("org.apache.uniffle.server.ShuffleServer", "--conf", serverConf.toString()), ports[2]);
    // The server registers by heartbeat; give the coordinator two of them.
    ChildService.sleep(5_000);
  }

  private void startCeleborn(String cp, Path dir, String memory, int[] ports) throws IOException {
    Path conf = write(dir.resolve("celeborn-defaults.conf"), List.of(
        "celeborn.master.host 127.0.0.1",
        "celeborn.master.port " + ports[0],
        "celeborn.master.endpoints 127.0.0.1:" + ports[0],
        "celeborn.master.http.port " + ports[1],
        "celeborn.worker.http.port " + ports[2],
        "celeborn.worker.push.port " + ports[3],
        "celeborn.worker.fetch.port " + ports[4],
        "celeborn.worker.replicate.port " + ports[5],
        "celeborn.master.ha.enabled false",
        "celeborn.metrics.enabled false",
        "celeborn.worker.storage.dirs " + dir.resolve("data")));
    String direct = "-XX:MaxDirectMemorySize=" + memory.toLowerCase().replace("ib", "");
    List<String> opens = List.of(direct, "-Dio.netty.tryReflectionSetAccessible=true",
        "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED");
    launch("jvm-celeborn-master", dir, cp, "1g", opens, List.of("org.apache.celeborn.service.deploy.master.Master",
        "--host", "127.0.0.1", "--port", Integer.toString(ports[0]), "--properties-file", conf.toString()), ports[0]);
    launch("jvm-celeborn-worker", dir, cp, "1g", opens,
        List.of("org.apache.celeborn.service.deploy.worker.Worker", "--host", "127.0.0.1", "--properties-file",
            conf.toString()), ports[3]);
    // The worker registers with the master after its ports open.
    ChildService.sleep(5_000);
  }

  private void launch(String name, Path dir, String cp, String heap, List<String> jvmOpts, List<String> main, int port)
      throws IOException {
    List<String> cmd = new ArrayList<>();
    cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
    cmd.add("-Xmx" + heap);
    cmd.addAll(jvmOpts);
    cmd.add("-cp");
    cmd.add(cp);
    cmd.addAll(main);
    Server s = new Server(name, dir.resolve(name + ".log"));
    servers.add(s);
    s.start(cmd, dir, port);
  }

  /** The coordinator quorum (Uniffle) or master endpoint (Celeborn) the client is given. */
  String endpoint() {
    return endpoint;
  }

  /** The PIDs of both processes, for CPU and peak RSS. */
  List<Long> pids() {
    return servers.stream().map(Server::pid).toList();
  }

  void assertAlive() {
    servers.forEach(Server::assertAlive);
  }

  @Override
  public void close() {
    for (int i = servers.size() - 1; i >= 0; i--) {
      servers.get(i).close();
    }
  }

  private static Path write(Path file, List<String> lines) throws IOException {
    Files.write(file, lines, StandardCharsets.UTF_8);
    return file;
  }

  private static boolean accepts(int port) {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 500);
      return true;
    } catch (IOException e) {
      return false;
    }
  }
}
