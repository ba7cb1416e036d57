package searchwire.harness;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * The engine-independent part of both harness launchers (OpenSearch and Elasticsearch):
 * argument check, node directories, pid file, construction and start with a clean exit on
 * failure, a SIGTERM hook that closes the node, and the keep-alive. Compiled into each
 * harness from {@code harness/common/src/main/java} (see the poms).
 */
public final class NodeMain {

    /** A call on the node that may throw. */
    @FunctionalInterface
    public interface Action {
        void run() throws Exception;
    }

    /** The node's {@code awaitClose}. */
    @FunctionalInterface
    public interface AwaitClose {
        boolean await(long timeout, TimeUnit unit) throws InterruptedException;
    }

    /** A constructed node, seen through the three calls the launcher needs. */
    public record RunningNode(Action start, Action close, AwaitClose awaitClose) {}

    /** Builds the node whose path.home is HOME (settings from HOME/config). */
    @FunctionalInterface
    public interface Factory {
        RunningNode create(Path home, Path config) throws Exception;
    }

    private NodeMain() {}

    /**
     * Runs the node: {@code args} must be exactly one path, the node's home. Writes this
     * JVM's pid to {@code -Dsearchwire.pidfile} when set. Exits 2 on bad usage and 1 when
     * the node cannot be built or started; otherwise returns only after SIGTERM closed it.
     * {@code beforeLogging} runs before the first log line (binding an engine's logging).
     */
    public static void run(String[] args, Runnable beforeLogging, Factory factory) throws Exception {
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

        beforeLogging.run();
        final Logger log = LogManager.getLogger(NodeMain.class);
        final long t0 = System.nanoTime();
        final RunningNode node;
        try {
            node = factory.create(home, config);
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
                node.close().run();
                node.awaitClose().await(20, TimeUnit.SECONDS);
            } catch (Exception e) {
                log.warn("error closing node", e);
            } finally {
                stopped.countDown();
                LogManager.shutdown();
            }
        }, "searchwire-shutdown"));

        try {
            node.start().run();
        } catch (Throwable t) {
            // exit rather than linger with half-started (non-daemon) threads; the hook closes the node
            log.error("searchwire harness: node start failed", t);
            System.exit(1);
        }
        log.info("searchwire harness: node started in {} ms", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
        stopped.await(); // keep-alive: node threads may all be daemons
    }
}
