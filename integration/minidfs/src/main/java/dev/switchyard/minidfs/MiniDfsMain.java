package dev.switchyard.minidfs;

import java.io.InputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import org.apache.hadoop.hdfs.DFSConfigKeys;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.server.datanode.DataNode;

/**
 * One namenode and one datanode (a {@link MiniDFSCluster}) on 127.0.0.1, on free ports, until
 * SIGTERM or until standard input closes (so that it ends with the test JVM that started it).
 *
 * <pre>java -cp ... dev.switchyard.minidfs.MiniDfsMain BASE_DIR INFO_FILE</pre>
 *
 * <p>Keeps its name and data directories under {@code BASE_DIR}. Once the datanode is up it
 * writes {@code INFO_FILE} (a properties file, written to a temporary name and renamed):
 *
 * <pre>
 * name_node=hdfs://127.0.0.1:PORT      (for hdfs-native / Switchyard's [storage.cold] name_node)
 * http=127.0.0.1:PORT                  (namenode HTTP: WebHDFS at /webhdfs/v1)
 * datanode=127.0.0.1:PORT              (data transfer address the namenode hands to clients)
 * </pre>
 *
 * <p>Permissions are off (any user may write anywhere), replication is 1, and the datanode
 * registers with 127.0.0.1, which clients such as hdfs-native connect to.
 */
public final class MiniDfsMain {

  private MiniDfsMain() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: MiniDfsMain BASE_DIR INFO_FILE");
      System.exit(2);
    }
    Path base = Paths.get(args[0]).toAbsolutePath();
    Path info = Paths.get(args[1]).toAbsolutePath();
    Files.createDirectories(base);
    long start = System.nanoTime();

    HdfsConfiguration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.resolve("dfs").toString());
    conf.set("hadoop.tmp.dir", base.resolve("tmp").toString());
    // Everything on loopback: RPC and HTTP bind there, and the datanode registers as 127.0.0.1
    // (MiniDFSCluster gives the datanode 127.0.0.1:0 addresses and host name itself).
    conf.set(DFSConfigKeys.DFS_NAMENODE_RPC_BIND_HOST_KEY, "127.0.0.1");
    conf.set(DFSConfigKeys.DFS_NAMENODE_HTTP_BIND_HOST_KEY, "127.0.0.1");
    conf.setBoolean(DFSConfigKeys.DFS_PERMISSIONS_ENABLED_KEY, false);
    conf.setInt(DFSConfigKeys.DFS_REPLICATION_KEY, 1);
    conf.setBoolean("dfs.webhdfs.enabled", true);

    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf, base.resolve("dfs").toFile())
            .nameNodePort(0)
            .nameNodeHttpPort(0)
            .numDataNodes(1)
            .format(true)
            .build();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  System.out.println("MiniDFS: shutting down");
                  cluster.shutdown(true);
                  System.out.println("MiniDFS: stopped");
                },
                "minidfs-shutdown"));
    cluster.waitActive();
    cluster.waitClusterUp();

    int rpcPort = cluster.getNameNodePort();
    InetSocketAddress http = cluster.getNameNode().getHttpAddress();
    DataNode dn = cluster.getDataNodes().get(0);
    String dataNode = dn.getDatanodeId().getIpAddr() + ":" + dn.getDatanodeId().getXferPort();
    String text =
        "name_node=hdfs://127.0.0.1:" + rpcPort + "\n"
            + "http=127.0.0.1:" + http.getPort() + "\n"
            + "datanode=" + dataNode + "\n";
    Path tmp = info.resolveSibling(info.getFileName() + ".tmp");
    Files.writeString(tmp, text, StandardCharsets.UTF_8);
    Files.move(tmp, info, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    System.out.printf(
        "MiniDFS ready in %d ms: hdfs://127.0.0.1:%d, http %s, datanode %s, base %s%n",
        (System.nanoTime() - start) / 1_000_000, rpcPort, http, dataNode, base);
    System.out.flush();

    // Run until standard input closes (the parent ended or closed it) or SIGTERM.
    InputStream in = System.in;
    byte[] buf = new byte[256];
    while (in.read(buf) >= 0) {
      // ignore input
    }
    System.out.println("MiniDFS: standard input closed");
    System.exit(0);
  }
}
