package searchwire.harness;

import java.util.Collections;

import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;

/**
 * Runs one real OpenSearch node in this JVM, bypassing Bootstrap (no security
 * manager, no jar-hell or bootstrap checks, no root check).
 *
 * Usage: java [-Dsearchwire.pidfile=FILE] -cp 'target/VERSION/lib/*:target/VERSION/classes' searchwire.harness.NodeLauncher HOME
 *
 * HOME is the node's path.home; its settings are read from HOME/config/opensearch.yml
 * (written by scripts/cluster). Plugins on the classpath: Netty4 (HTTP + transport)
 * and analysis-common, built into the node by the major version's {@code Plugins}
 * (src/major2, src/major3). SIGTERM closes the node cleanly.
 */
public final class NodeLauncher {

    private NodeLauncher() {}

    public static void main(String[] args) throws Exception {
        NodeMain.run(args, () -> {}, (home, config) -> {
            final Settings input = Settings.builder().put("path.home", home.toString()).build();
            final Environment env = InternalSettingsPreparer.prepareEnvironment(
                input, Collections.emptyMap(), config, () -> "searchwire-node");
            final Node node = Plugins.node(env);
            return new NodeMain.RunningNode(node::start, node::close, node::awaitClose);
        });
    }
}
