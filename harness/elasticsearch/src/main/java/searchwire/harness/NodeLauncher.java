package searchwire.harness;

import java.util.Collections;
import java.util.List;

import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.node.HarnessNode;
import org.elasticsearch.node.InternalSettingsPreparer;
import org.elasticsearch.node.Node;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.transport.netty4.Netty4Plugin;

/**
 * Runs one real Elasticsearch 8 node in this JVM, bypassing the normal bootstrap (no
 * entitlement agent, no security manager, no bootstrap checks, no root check).
 *
 * Usage: java [-Dsearchwire.pidfile=FILE] -cp 'target/lib/*:target/classes' searchwire.harness.NodeLauncher HOME
 *
 * HOME is the node's path.home; its settings are read from HOME/config/elasticsearch.yml
 * (written by scripts/cluster). Plugins on the classpath: Netty4 (HTTP + transport) and
 * {@link RootInfoPlugin} ({@code GET /}). SIGTERM closes the node cleanly.
 */
public final class NodeLauncher {

    private NodeLauncher() {}

    public static void main(String[] args) throws Exception {
        // Elasticsearch's own logging facade must be bound to log4j before any server class
        // logs (the normal bootstrap does this); log4j itself reads log4j2.properties from the
        // classpath.
        NodeMain.run(args, LogConfigurator::configureESLogging, (home, config) -> {
            final Settings input = Settings.builder().put("path.home", home.toString()).build();
            final Environment env = InternalSettingsPreparer.prepareEnvironment(
                input, Collections.emptyMap(), config, () -> "searchwire-node");
            final List<Class<? extends Plugin>> plugins = List.of(Netty4Plugin.class, RootInfoPlugin.class);
            final Node node = new HarnessNode(env, plugins);
            return new NodeMain.RunningNode(node::start, node::close, node::awaitClose);
        });
    }
}
