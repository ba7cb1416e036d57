package searchwire.harness;

import java.util.Collection;
import java.util.Collections;
import java.util.List;

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
        NodeMain.run(args, () -> {}, (home, config) -> {
            final Settings input = Settings.builder().put("path.home", home.toString()).build();
            final Environment env = InternalSettingsPreparer.prepareEnvironment(
                input, Collections.emptyMap(), config, () -> "searchwire-node");
            final List<Class<? extends Plugin>> plugins = List.of(Netty4Plugin.class, CommonAnalysisPlugin.class);
            final Node node = new HarnessNode(env, plugins);
            return new NodeMain.RunningNode(node::start, node::close, node::awaitClose);
        });
    }
}
