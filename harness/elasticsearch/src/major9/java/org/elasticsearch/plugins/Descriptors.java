package org.elasticsearch.plugins;

import java.util.List;

import org.elasticsearch.Build;

/**
 * The 9.x descriptor of a classpath plugin (see {@link HarnessPluginsService}): 9.x adds
 * the deployment target, {@code ALL} for a plugin loaded on every kind of node.
 */
final class Descriptors {

    private Descriptors() {}

    static PluginDescriptor of(Class<? extends Plugin> c) {
        return new PluginDescriptor(
            c.getName(), "classpath plugin (searchwire harness)", "NA", Build.current().version(),
            Integer.toString(Runtime.version().feature()), c.getName(), null, List.of(),
            false, false, false, false, PluginDescriptor.DeploymentTarget.ALL);
    }
}
