package searchwire.harness;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

/**
 * Runs one real OpenSearch node in this JVM, bypassing Bootstrap (no security
 * manager, no jar-hell or bootstrap checks, no root check).
 *
 * Usage: java [-Dsearchwire.pidfile=FILE] -cp 'target/lib/*:target/classes' searchwire.harness.NodeLauncher HOME
 *
 * HOME is the node's path.home; its settings are read from HOME/config/opensearch.yml
 * (written by scripts/cluster). Plugins on the classpath: Netty4 (HTTP + transport)
 * and analysis-common. SIGTERM closes the node cleanly.
 */
public final class NodeLauncher {

    /** Node subclass to reach the protected constructor that accepts classpath plugins (as MockNode does). */
    static final class HarnessNode extends Node {
        HarnessNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
            super(env, plugins, true);
        }
    }

    private NodeLauncher() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: NodeLauncher PATH_HOME");
            System.exit(2);
        }
        final Path home = Paths.get(args[0]).toAbsolutePath().normalize();
        final Path config = home.resolve("config");
        Files.createDirectories(config);
        Files.createDirectories(home.resolve("plugins"));
        Files.createDirectories(home.resolve("modules"));

        // The pid of this JVM, for scripts/cluster (which also records $! — they agree, since
        // the script execs java without forking; this write makes it robust to wrappers).
        final String pidFile = System.getProperty("searchwire.pidfile");
        if (pidFile != null && !pidFile.isEmpty()) {
            Files.writeString(Paths.get(pidFile), ProcessHandle.current().pid() + "\n");
        }

        final Logger log = LogManager.getLogger(NodeLauncher.class);
        final Settings input = Settings.builder().put("path.home", home.toString()).build();
        final Environment env = InternalSettingsPreparer.prepareEnvironment(
            input, Collections.emptyMap(), config, () -> "searchwire-node");

        final List<Class<? extends Plugin>> plugins = List.of(Netty4Plugin.class, CommonAnalysisPlugin.class);
        final long t0 = System.nanoTime();
        final Node node;
        try {
            node = new HarnessNode(env, plugins);
        } catch (Throwable t) {
            log.error("searchwire harness: node construction failed", t);
            t.printStackTrace();
            LogManager.shutdown();
            System.exit(1);
            return;
        }
        final CountDownLatch stopped = new CountDownLatch(1);

        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                log.info("searchwire harness: closing node");
                node.close();
                node.awaitClose(20, TimeUnit.SECONDS);
            } catch (Exception e) {
                log.warn("error closing node", e);
            } finally {
                stopped.countDown();
                LogManager.shutdown();
            }
        }, "searchwire-shutdown"));

        try {
            node.start();
        } catch (Throwable t) {
            // exit rather than linger with half-started (non-daemon) threads; the hook closes the node
            log.error("searchwire harness: node start failed", t);
            System.exit(1);
        }
        log.info("searchwire harness: node started in {} ms", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
        stopped.await(); // keep-alive: node threads may all be daemons
    }
}
